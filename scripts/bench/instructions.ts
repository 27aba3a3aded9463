// npm run bench:instructions: instructions per request, counted by valgrind's callgrind, for the built service and
// the bare-Fastify baseline, scenario by scenario. Wall-clock ratios move ±15 % run to run on these machines; these
// counts repeat to a fraction of a percent, so they are what a change is judged by.
//
// Each server runs under callgrind. After a warm-up (WARM_UP requests of every scenario, on connections that close
// and reopen, then half as many of the scenario itself, so that the optimising compiler has settled: a window
// that still compiles counts tens of thousands of instructions more), each scenario is counted in WINDOWS
// windows: the counters are zeroed, exactly COUNTED requests are sent, and the counters dumped; a window's total
// over COUNTED, every thread of the process included, is its instructions per request. The figure is the lowest
// window: what disturbs a window (the optimising compiler still at work, a full garbage collection) only ever
// adds instructions, so the lowest is the closest to the steady state; every window is printed beside it.
// INSTRUCTIONS_WARM_UP, INSTRUCTIONS_COUNTED and INSTRUCTIONS_WINDOWS set them (default 6 000, 1 000 and 5).
// What one step of the pipeline costs is the difference between two runs of the service, with and without it:
// INSTRUCTIONS_SERVICE_ENV (a JSON object, e.g. '{"RATE_LIMIT":"off"}') is added to the service's environment, and
// INSTRUCTIONS_BASELINE=none counts the service alone.
//
// Each window's instructions in libuv's timers phase are counted apart and left out of the figure. Under
// callgrind a request takes about 50 times as long as at full speed, so work that runs on a clock rather than per
// request (the load samples every 250 ms, under-pressure's and load shedding's, each reading and clearing an
// event-loop-delay histogram, about 190 000 instructions; Node's check of request deadlines every second; the session sweep) would be charged to
// each request about 50 times over: 13 000 to 15 000 instructions a request, against about 300 at full speed. No
// request's own work runs in a timer. The timers' share of each window is printed beside it.
//
// Both servers run with V8's memory reducer off, and only that: it starts full garbage collections when the
// allocation rate per second of wall time is low, which, 50 times slower under valgrind, it always is, and
// most of all in the pauses between windows. Each such collection drops the hidden classes of objects no request
// holds at that moment and with them the optimised code that relies on them ("reason: weak objects" under
// --trace-deopt: 74 functions at once), so the next window spends 100 to 250 thousand instructions a request
// compiling again. A process under real load does not see that collection every few seconds.
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { Agent, request } from 'node:http'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { freePort } from '../../harness/net.js'
import { call, serviceEnv } from './service.js'

const WARM_UP = Number(process.env.INSTRUCTIONS_WARM_UP ?? 6000)
const COUNTED = Number(process.env.INSTRUCTIONS_COUNTED ?? 1000)
const WINDOWS = Number(process.env.INSTRUCTIONS_WINDOWS ?? 5)
const CONNECTIONS = 10
// callgrind_control finds a process's control pipes by a name that valgrind derives from HOST, so the servers and
// callgrind_control must see the same one.
const HOST = '127.0.0.1'
const run = promisify(execFile)

// As in npm run bench, and so every feature on, but for load shedding on the event loop's lag, which valgrind's
// slowness would trip.
const countedEnv: Record<string, string> = { ...serviceEnv, MAX_EVENT_LOOP_DELAY_MS: '0', ...JSON.parse(process.env.INSTRUCTIONS_SERVICE_ENV ?? '{}') as Record<string, string> }
const withBaseline = process.env.INSTRUCTIONS_BASELINE !== 'none'

interface Server { process: ChildProcess, url: string, profiles: string }

async function underCallgrind (command: string[], env: NodeJS.ProcessEnv): Promise<Server> {
  const port = await freePort(HOST)
  const profiles = await mkdtemp(join(tmpdir(), 'callgrind-'))
  const child = spawn('valgrind', [
    '--tool=callgrind', '--dump-instr=no', '--collect-jumps=no', `--callgrind-out-file=${profiles}/out.%p`, ...command
  ], { env: { ...process.env, ...env, HOST, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] })
  let errors = ''
  child.stderr?.on('data', (chunk: Buffer) => { errors = (errors + chunk.toString()).slice(-4000) })
  const url = await new Promise<string>((resolve, reject) => {
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const match = /listening at (http:\/\/[\d.]+:\d+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.once('exit', (code) => { reject(new Error(`${command.join(' ')} exited with ${code}:\n${errors}`)) })
    if (command.includes('dist/src/server.js')) {
      const ready = async (): Promise<void> => {
        const ok = await fetch(`http://${HOST}:${port}/health/ready`).then((response) => response.ok, () => false)
        if (ok) resolve(`http://${HOST}:${port}`)
        else setTimeout(() => { void ready() }, 200)
      }
      void ready()
    }
  })
  return { process: child, url, profiles }
}

async function stop (server: Server): Promise<void> {
  const exited = new Promise((resolve) => server.process.once('exit', resolve))
  server.process.kill('SIGTERM')
  await exited
  await rm(server.profiles, { recursive: true, force: true })
}

const callgrindControl = async (server: Server, option: string): Promise<void> => {
  await run('callgrind_control', [option, String(server.process.pid)], { env: { ...process.env, HOST } })
}

interface Scenario {
  method: 'GET' | 'POST' | 'PATCH'
  path: string
  body?: unknown
  status: number
}

/**
 * Sends `count` requests of the scenario over `CONNECTIONS` keep-alive connections; fails on any other status.
 * Both servers get the very same requests, the service's access token included, as in npm run bench: the baseline
 * ignores the token, but receiving its 400 characters is part of any server's cost of a request.
 */
async function send (url: string, scenario: Scenario, count: number, agent: Agent, token: string): Promise<void> {
  const payload = scenario.body === undefined ? undefined : JSON.stringify(scenario.body)
  const headers: Record<string, string | number> = { authorization: `Bearer ${token}` }
  if (payload !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) })
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < count) {
      next += 1
      const status = await new Promise<number>((resolve, reject) => {
        const outgoing = request(`${url}${scenario.path}`, { method: scenario.method, headers, agent }, (response) => {
          response.resume()
          response.on('end', () => { resolve(response.statusCode ?? 0) })
        })
        outgoing.on('error', reject)
        outgoing.end(payload)
      })
      if (status !== scenario.status) throw new Error(`${scenario.method} ${scenario.path}: ${status}, not ${scenario.status}`)
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, worker))
}

/**
 * The instructions of a callgrind dump spent in libuv's timers phase (`uv__run_timers`, with everything it calls):
 * the sum of its own cost lines and of the inclusive cost lines of its calls, in every block of that function.
 */
function timersPhase (profile: string): number {
  const names = new Map<string, string>()
  let inTimers = false
  let instructions = 0
  for (const line of profile.split('\n')) {
    // Callgrind names each function once, as `fn=(id) name` or `cfn=(id) name`, then by `(id)` alone.
    const named = /^c?fn=\((\d+)\)(?: (.*))?$/.exec(line)
    if (named !== null) {
      const [, id = '', name] = named
      if (name !== undefined) names.set(id, name)
      if (line.startsWith('fn=')) inTimers = names.get(id) === 'uv__run_timers'
    } else if (inTimers && /^([+-]?\d+|\*) \d+$/.test(line)) {
      // A cost line: a position (`*` for the same as the last), then instructions.
      instructions += Number(line.split(' ')[1])
    }
  }
  return instructions
}

interface Counts {
  /** Instructions per request in each window, the timers phase left out. */
  requests: Record<string, number[]>
  /** The timers phase's instructions per request in each window. */
  timers: Record<string, number[]>
}

/** Instructions per request of each scenario in each window, in one process under callgrind. */
async function count (server: Server, scenarios: Record<string, Scenario>, token: string): Promise<Counts> {
  // Five rounds of warm-up, each on new connections.
  for (let round = 0; round < 5; round += 1) {
    const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
    for (const scenario of Object.values(scenarios)) await send(server.url, scenario, WARM_UP / 5, agent, token)
    agent.destroy()
  }
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  for (const scenario of Object.values(scenarios)) await send(server.url, scenario, CONNECTIONS, agent, token)
  const counts: Record<string, number[]> = {}
  const timerCounts: Record<string, number[]> = {}
  let dump = 0
  for (const [name, scenario] of Object.entries(scenarios)) {
    counts[name] = []
    timerCounts[name] = []
    // The scenarios before this one may have made the compiler drop code this one uses: it settles again first.
    await send(server.url, scenario, WARM_UP / 2, agent, token)
    for (let window = 0; window < WINDOWS; window += 1) {
      await callgrindControl(server, '--zero')
      await send(server.url, scenario, COUNTED, agent, token)
      await callgrindControl(server, '--dump')
      dump += 1
      const profile = await readFile(join(server.profiles, `out.${server.process.pid}.${dump}`), 'utf8')
      const total = /^summary: (\d+)$/m.exec(profile)?.[1]
      if (total === undefined) throw new Error(`No summary in callgrind's dump ${dump}`)
      const timers = timersPhase(profile)
      counts[name].push(Math.round((Number(total) - timers) / COUNTED))
      timerCounts[name].push(Math.round(timers / COUNTED))
    }
  }
  agent.destroy()
  return { requests: counts, timers: timerCounts }
}

const started = performance.now()
console.log(`Counting instructions: ${WARM_UP} warm-up requests per scenario, then ${WINDOWS} windows of ${COUNTED}; the service, then the baseline (about six minutes)`)
const service = await underCallgrind(['node', '--no-memory-reducer', 'dist/src/server.js'], countedEnv)
const { accessToken: token } = await call(`${service.url}/v1/auth/register`, 'POST', { email: 'bench@example.com', password: 'benchmark password', firstName: 'Bench', lastName: 'Mark', role: 'contributor' })
for (let index = 0; index < 100; index += 1) await call(`${service.url}/v1/items`, 'POST', { name: `Item ${index}`, description: 'A benchmark item with a short description.' }, token)
const page = await call(`${service.url}/v1/items?pageSize=20`, 'GET', undefined, token)
const itemPath = `/v1/items/${String(page.data[0].id)}`
const scenarios: Record<string, Scenario> = {
  'GET /v1/items?pageSize=20': { method: 'GET', path: '/v1/items?pageSize=20', status: 200 },
  'GET /v1/items/{id}': { method: 'GET', path: itemPath, status: 200 },
  'POST /v1/items': { method: 'POST', path: '/v1/items', body: { name: 'Created', description: null }, status: 201 },
  'PATCH /v1/items/{id}': { method: 'PATCH', path: itemPath, body: { name: 'Edited' }, status: 200 }
}
const serviceCounts = await count(service, scenarios, token)
await stop(service)
console.log(`service counted (${Math.round((performance.now() - started) / 1000)} s)`)

async function countBaseline (): Promise<Counts> {
  const baseline = await underCallgrind(['node', '--no-memory-reducer', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: 'bare', BASELINE_PAGE: JSON.stringify(page) })
  const counts = await count(baseline, scenarios, token)
  await stop(baseline)
  return counts
}
const baselineCounts: Counts = withBaseline ? await countBaseline() : { requests: {}, timers: {} }

const rows = Object.keys(scenarios).map((name) => {
  const windows = { service: serviceCounts.requests[name] ?? [], baseline: baselineCounts.requests[name] ?? [] }
  const timers = { service: serviceCounts.timers[name] ?? [], baseline: baselineCounts.timers[name] ?? [] }
  const instructions = Math.min(...windows.service)
  const bare = windows.baseline.length === 0 ? NaN : Math.min(...windows.baseline)
  return { name, instructions, baseline: bare, ratio: Number((instructions / bare).toFixed(3)), windows, timers }
})
const table = [
  '| scenario | service instructions/request | bare Fastify | ratio | service windows | baseline windows | timers phase/request (service; baseline), left out |',
  '|---|---:|---:|---:|---|---|---|',
  ...rows.map((row) => `| ${row.name} | ${row.instructions} | ${row.baseline} | ${row.ratio} | ${row.windows.service.join(', ')} | ${row.windows.baseline.join(', ')} | ${row.timers.service.join(', ')}; ${row.timers.baseline.join(', ')} |`)
].join('\n')
await mkdir('bench-results', { recursive: true })
await writeFile('bench-results/instructions.json', `${JSON.stringify({ date: new Date().toISOString(), node: process.version, warmUp: WARM_UP, counted: COUNTED, windows: WINDOWS, serviceEnv: countedEnv, rows }, null, 2)}\n`)
await writeFile('bench-results/instructions.md', `${table}\n`)
console.log(table)
console.log(`(${Math.round((performance.now() - started) / 1000)} s)`)
