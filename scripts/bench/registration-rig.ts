// npm run bench:registration-rig: registration as a team's test rig meets it, on the built service started from an
// environment, on the memory store and on a Redis of maxmemory 256 MB (one of the script's, keeping nothing): 600
// accounts registered 16 at a time from one address with the rig's settings (docs/testing.md: RATE_LIMIT=off, the
// cheapest hash), and 200 from 20 addresses (X-Forwarded-For, the proxy trusted) on the defaults for 10 000 accounts,
// rate limits and production's hash included, each 429 waited out for its Retry-After as a client does. Prints each run's statuses
// and time. Run `npm run build` first (npm run bench does).
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { freePort } from '../../harness/net.js'
import { type Server, startService, stop } from './servers.js'

const JWT_SECRET = 'a-bench-secret-that-is-at-least-32-bytes-long'
const RIG = { NODE_ENV: 'test', RATE_LIMIT: 'off', PASSWORD_HASH_MEMORY_KIB: '8', PASSWORD_HASH_PASSES: '1' }
// A deployment sized for more accounts than the default: its service-wide limit on registrations lets the run's through.
const DEFAULTS = { NODE_ENV: 'production', TRUST_PROXY: '127.0.0.1', MAX_ACCOUNTS: '10000' }

async function ownRedis (maxmemory: string): Promise<{ url: string, process: ChildProcess }> {
  const port = await freePort()
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory', maxmemory], { stdio: 'ignore' })
  const url = `redis://127.0.0.1:${port}`
  const { Redis } = await import('ioredis')
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0 }).on('error', () => {})
  while (await probe.ping().catch(() => undefined) !== 'PONG') await new Promise((resolve) => setTimeout(resolve, 20))
  probe.disconnect()
  return { url, process: child }
}

/** Registers `accounts`, `atOnce` at a time, from `addresses` addresses in turn: the statuses answered, and how long it took. */
async function register (server: Server, accounts: number, atOnce: number, addresses: number): Promise<{ statuses: Record<number, number>, seconds: number }> {
  const statuses: Record<number, number> = {}
  let next = 0
  const started = performance.now()
  const worker = async (): Promise<void> => {
    while (next < accounts) {
      const index = next++
      const body = JSON.stringify({ email: `rig-${randomUUID()}@example.com`, password: 'correct horse battery staple', firstName: 'Rig', lastName: 'Worker', role: 'contributor' })
      for (;;) {
        const response = await fetch(`${server.url}/v1/auth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-forwarded-for': `203.0.113.${index % addresses + 1}` },
          body
        })
        await response.arrayBuffer()
        statuses[response.status] = (statuses[response.status] ?? 0) + 1
        if (response.status !== 429) break
        await new Promise((resolve) => setTimeout(resolve, Number(response.headers.get('retry-after') ?? 1) * 1000))
      }
    }
  }
  await Promise.all(Array.from({ length: atOnce }, worker))
  return { statuses, seconds: (performance.now() - started) / 1000 }
}

const stores: Array<[string, () => Promise<{ env: NodeJS.ProcessEnv, close: () => void }>]> = [
  ['memory', async () => ({ env: { STORE: 'memory' }, close: () => {} })],
  ['Redis, maxmemory 256 MB', async () => {
    const redis = await ownRedis('256mb')
    return { env: { STORE: 'redis', REDIS_URL: redis.url, REDIS_KEY_PREFIX: `rig-${randomUUID()}:` }, close: () => { redis.process.kill('SIGKILL') } }
  }]
]
const runs: Array<[string, NodeJS.ProcessEnv, number, number, number]> = [
  ['600 accounts, 16 at a time, one address, the rig\'s settings', RIG, 600, 16, 1],
  ['200 accounts, 16 at a time, 20 addresses, the defaults', DEFAULTS, 200, 16, 20]
]
for (const [store, open] of stores) {
  for (const [run, settings, accounts, atOnce, addresses] of runs) {
    const { env, close } = await open()
    const server = await startService({ JWT_SECRET, LOG_LEVEL: 'warn', ...settings, ...env }, false)
    const { statuses, seconds } = await register(server, accounts, atOnce, addresses)
    console.log(`${store}: ${run}: ${JSON.stringify(statuses)} in ${seconds.toFixed(1)} s (${Math.round(accounts / seconds)} a second)`)
    await stop(server)
    close()
  }
}
