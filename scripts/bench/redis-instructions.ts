// npm run bench:redis-instructions: the instructions a Redis server spends per create and per edit, for the built
// service with STORE=redis and for bare Fastify and ioredis writing the item by one EVALSHA (the anchor of npm run
// bench), counted by valgrind's callgrind on a Redis server of the run's own: Redis's CPU time per request moves from
// run to run on these machines (it shares the two cores with the service and the load), its instructions far less.
// The create is counted a second time as the official client sends it, under an Idempotency-Key of its own: its record
// besides, and the room made for it among its user's keys.
//
// Only Redis runs under callgrind; the servers run at full speed, each request its own round trip. After WARM_UP
// requests of a scenario, the counters are zeroed, exactly COUNTED requests are sent and the counters dumped: the
// dump's total over COUNTED is the scenario's figure. REDIS_INSTRUCTIONS_WARM_UP and REDIS_INSTRUCTIONS_COUNTED set
// them (default 200 and 1 000). REDIS_INSTRUCTIONS_SERVICE: the checkout whose built service is counted (default
// this one), to count a build before a change beside the one after it.
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { freePort } from '../../harness/net.js'
import { start, startService, stop } from './servers.js'
import { call, serviceEnv } from './service.js'

const WARM_UP = Number(process.env.REDIS_INSTRUCTIONS_WARM_UP ?? 200)
const COUNTED = Number(process.env.REDIS_INSTRUCTIONS_COUNTED ?? 1000)
const SERVICE = resolve(process.env.REDIS_INSTRUCTIONS_SERVICE ?? '.')
const CONNECTIONS = 4
const run = promisify(execFile)

const port = await freePort()
const redisUrl = `redis://127.0.0.1:${port}`
const profiles = await mkdtemp(join(tmpdir(), 'redis-callgrind-'))
// Only what Redis does for a client's commands is counted, reading them, running them and writing their replies: not
// its periodic work (serverCron, ten times a second), which under callgrind's slowness a fast request would be
// charged many times over.
const redisServer: ChildProcess = spawn('valgrind', ['--tool=callgrind', '--dump-instr=no', '--collect-jumps=no', `--callgrind-out-file=${profiles}/out.%p`,
  '--toggle-collect=readQueryFromClient', '--toggle-collect=writeToClient',
  'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
const redis = new Redis(redisUrl, { lazyConnect: true, retryStrategy: () => 200 }).on('error', () => {})
while (await redis.ping().catch(() => undefined) !== 'PONG') await new Promise((resolve) => setTimeout(resolve, 200))

// The instructions Redis ran since the counters were last zeroed: callgrind_control dumps them to a file of their own.
async function dumped (): Promise<number> {
  const before = new Set(await readdir(profiles))
  await run('callgrind_control', ['--dump', String(redisServer.pid)])
  // callgrind writes the dump once Redis next runs, which may be after callgrind_control returns.
  for (;;) {
    const [file] = (await readdir(profiles)).filter((name) => !before.has(name))
    const total = file === undefined ? undefined : /^(?:summary|totals): (\d+)/m.exec(await readFile(join(profiles, file), 'utf8'))?.[1]
    if (total !== undefined) return Number(total)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

const service = await startService({ ...serviceEnv, STORE: 'redis', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: 'service:' }, true, join(SERVICE, 'dist/src/server.js'))
const anchor = await start(['node', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: 'redis', REDIS_URL: redisUrl, REDIS_KEY_PREFIX: 'anchor:' })
const contributor = await call(`${service.url}/v1/auth/register`, 'POST', { email: 'bench@example.com', password: 'benchmark password', firstName: 'Bench', lastName: 'Mark', role: 'contributor' })
const body = { name: 'Created', description: null }
const serviceItem = await call(`${service.url}/v1/items`, 'POST', body, contributor.accessToken)
const anchorItem = await call(`${anchor.url}/v1/items`, 'POST', body)

interface Scenario { url: string, method: 'POST' | 'PATCH', body: unknown, token?: string, keyed?: true }
const scenarios: Record<string, Scenario> = {
  'anchor: POST /v1/items': { url: `${anchor.url}/v1/items`, method: 'POST', body },
  'POST /v1/items with STORE=redis': { url: `${service.url}/v1/items`, method: 'POST', body, token: contributor.accessToken },
  // As the official client sends a create: under an Idempotency-Key of its own, recorded by the create.
  'POST /v1/items with STORE=redis, an Idempotency-Key each': { url: `${service.url}/v1/items`, method: 'POST', body, token: contributor.accessToken, keyed: true },
  'anchor: PATCH /v1/items/{id}': { url: `${anchor.url}/v1/items/${anchorItem.id}`, method: 'PATCH', body: { name: 'Edited' } },
  'PATCH /v1/items/{id} with STORE=redis': { url: `${service.url}/v1/items/${serviceItem.id}`, method: 'PATCH', body: { name: 'Edited' }, token: contributor.accessToken }
}
const anchorOf = (name: string): string => name.startsWith('POST') ? 'anchor: POST /v1/items' : 'anchor: PATCH /v1/items/{id}'

const figures: Record<string, number> = {}
for (const [name, { url, method, body, token, keyed }] of Object.entries(scenarios)) {
  const headers = { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) }
  const options = {
    url,
    method,
    connections: CONNECTIONS,
    headers,
    body: JSON.stringify(body),
    ...(keyed === true ? { requests: [{ setupRequest: (request: object) => ({ ...request, headers: { ...headers, 'idempotency-key': randomUUID() } }) }] } : {})
  }
  await autocannon({ ...options, amount: WARM_UP })
  await run('callgrind_control', ['--zero', String(redisServer.pid)])
  const result = await autocannon({ ...options, amount: COUNTED })
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${name}: ${result.non2xx} answers not 2xx, ${result.errors} errors`)
  figures[name] = Math.round(await dumped() / COUNTED)
  const ratio = name.startsWith('anchor') ? '' : `, ${(figures[name] / figures[anchorOf(name)]!).toFixed(2)}× the anchor`
  console.log(`${name}: ${figures[name].toLocaleString('en')} Redis instructions a request${ratio}`)
}

await stop(service)
await stop(anchor)
redis.disconnect()
redisServer.kill('SIGTERM')
await new Promise((resolve) => redisServer.once('exit', resolve))
await rm(profiles, { recursive: true, force: true })
