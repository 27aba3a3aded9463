// npm run bench: the built service and two bare-Fastify baselines, each pinned to core 0 while autocannon runs
// on core 1, in one run. Prints requests/s, p50/p99 latency, errors and the ratio to the baseline, and writes
// bench-results/bench.json and bench-results/bench.md. BENCH_DURATION (seconds, default 8) sets each scenario's length.
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdir, writeFile } from 'node:fs/promises'
import { type AddressInfo, createServer } from 'node:net'
import autocannon from 'autocannon'

const DURATION = Number(process.env.BENCH_DURATION ?? 8)
const CONNECTIONS = 10
const JWT_SECRET = 'a-benchmark-secret-that-is-at-least-32-bytes'
const pin = (command: string[]): string[] => ['taskset', '-c', '0', ...command]

interface Server { process: ChildProcess, url: string }

async function start (command: string[], env: NodeJS.ProcessEnv): Promise<Server> {
  const [executable = '', ...args] = pin(command)
  const child = spawn(executable, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  const url = await new Promise<string>((resolve, reject) => {
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const match = /listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.once('exit', (code) => { reject(new Error(`${command.join(' ')} exited with ${code}`)) })
  })
  return { process: child, url }
}

async function stop (server: Server): Promise<void> {
  const exited = new Promise((resolve) => server.process.once('exit', resolve))
  server.process.kill('SIGTERM')
  await exited
}

const serviceEnv = { JWT_SECRET, LOG_LEVEL: 'warn', RATE_LIMIT: 'off', MAX_EVENT_LOOP_DELAY: '0' }

async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Starts the built service and resolves once it answers its readiness check. */
async function startService (): Promise<Server & { startupMs: number }> {
  const port = await freePort()
  const started = performance.now()
  const [executable = '', ...args] = pin(['node', 'dist/src/server.js'])
  const child = spawn(executable, args, { env: { ...process.env, ...serviceEnv, PORT: String(port) }, stdio: ['ignore', 'ignore', 'inherit'] })
  const url = `http://127.0.0.1:${port}`
  while (!await fetch(`${url}/health/ready`).then((response) => response.ok, () => false)) {
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  return { process: child, url, startupMs: performance.now() - started }
}

async function call (url: string, method: string, body?: unknown, token?: string): Promise<any> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (token !== undefined) headers.authorization = `Bearer ${token}`
  const response = await fetch(url, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
  if (!response.ok) throw new Error(`${method} ${url}: ${response.status} ${await response.text()}`)
  return await response.json()
}

interface Load {
  url: string
  method?: 'GET' | 'POST' | 'PATCH'
  token?: string
  body?: unknown
  connections?: number
}

interface Measurement {
  requestsPerSecond: number
  p50: number
  p99: number
  non2xx: number
  errors: number
}

async function measure (load: Load, duration = DURATION): Promise<Measurement> {
  const options = {
    url: load.url,
    method: load.method ?? 'GET',
    connections: load.connections ?? CONNECTIONS,
    headers: {
      'content-type': 'application/json',
      ...(load.token === undefined ? {} : { authorization: `Bearer ${load.token}` })
    },
    ...(load.body === undefined ? {} : { body: JSON.stringify(load.body) })
  }
  await autocannon({ ...options, duration: 1 })
  const result = await autocannon({ ...options, duration })
  return {
    requestsPerSecond: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts
  }
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN

// Seed the service and take its first page, so the baselines serve the very same payload.
const service = await startService()
const v1 = `${service.url}/v1`
const contributor = await call(`${v1}/auth/register`, 'POST', { email: 'bench@example.com', password: 'benchmark password', firstName: 'Bench', lastName: 'Mark', role: 'contributor' })
const token: string = contributor.accessToken
for (let index = 0; index < 100; index += 1) await call(`${v1}/items`, 'POST', { name: `Item ${index}`, description: 'A benchmark item with a short description.' }, token)
const page = await call(`${v1}/items?pageSize=20`, 'GET', undefined, token)
const itemId: string = page.data[0].id

const baseline = await start(['node', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: 'bare', BASELINE_PAGE: JSON.stringify(page) })
const bare = await measure({ url: `${baseline.url}/v1/items?pageSize=20`, token })
await stop(baseline)
const jwtBaseline = await start(['node', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: 'jwt', BASELINE_PAGE: JSON.stringify(page), JWT_SECRET })
const usualJwt = await measure({ url: `${jwtBaseline.url}/v1/items?pageSize=20`, token })
await stop(jwtBaseline)

const scenarios: Record<string, Measurement> = {
  'baseline: bare Fastify, GET /v1/items': bare,
  'baseline: + @fastify/jwt request.jwtVerify()': usualJwt,
  'GET /v1/items?pageSize=20': await measure({ url: `${v1}/items?pageSize=20`, token }),
  'GET /v1/items/{id}': await measure({ url: `${v1}/items/${itemId}`, token }),
  'POST /v1/items': await measure({ url: `${v1}/items`, method: 'POST', token, body: { name: 'Created', description: null } }),
  'PATCH /v1/items/{id}': await measure({ url: `${v1}/items/${itemId}`, method: 'PATCH', token, body: { name: 'Edited' } }),
  'POST /v1/auth/login': await measure({ url: `${v1}/auth/login`, method: 'POST', body: { email: 'bench@example.com', password: 'benchmark password' } })
}
const [listDuringStorm] = await Promise.all([
  measure({ url: `${v1}/items?pageSize=20`, token }),
  measure({ url: `${v1}/auth/login`, method: 'POST', connections: 8, body: { email: 'bench@example.com', password: 'benchmark password' } })
])
scenarios['GET /v1/items during a login storm'] = listDuringStorm
await stop(service)

const startups: number[] = []
for (let run = 0; run < 5; run += 1) {
  const fresh = await startService()
  startups.push(fresh.startupMs)
  await stop(fresh)
}

const rows = Object.entries(scenarios).map(([name, m]) => ({
  name,
  ...m,
  ratio: Number((m.requestsPerSecond / bare.requestsPerSecond).toFixed(2)),
  p99Ratio: Number((m.p99 / Math.max(bare.p99, 1)).toFixed(2))
}))
const list = scenarios['GET /v1/items?pageSize=20']
const report = {
  date: new Date().toISOString(),
  node: process.version,
  durationSeconds: DURATION,
  connections: CONNECTIONS,
  rows,
  loginStormP99Ratio: Number((listDuringStorm.p99 / Math.max(list?.p99 ?? 1, 1)).toFixed(2)),
  startupMs: { median: Math.round(median(startups)), runs: startups.map(Math.round) }
}

const table = [
  '| scenario | req/s | p50 ms | p99 ms | non-2xx | errors | × baseline req/s | × baseline p99 |',
  '|---|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map((row) => `| ${row.name} | ${row.requestsPerSecond} | ${row.p50} | ${row.p99} | ${row.non2xx} | ${row.errors} | ${row.ratio} | ${row.p99Ratio} |`),
  '',
  `List p99 during a login storm / alone: ${report.loginStormP99Ratio}×`,
  `Process start to first successful request: median ${report.startupMs.median} ms (runs: ${report.startupMs.runs.join(', ')})`
].join('\n')
await mkdir('bench-results', { recursive: true })
await writeFile('bench-results/bench.json', `${JSON.stringify(report, null, 2)}\n`)
await writeFile('bench-results/bench.md', `${table}\n`)
console.log(table)
