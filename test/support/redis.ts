// Tests that need Redis: where it is (REDIS_URL), and a key prefix of their own that is deleted afterwards.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import type { Change, Held, Refused } from '../../src/store/redis/commit.js'
import { compiledChange } from '../../src/store/redis/compiled-commit.js'
import type { Limited } from '../../src/store/redis/rate-counter.js'
import { freePort } from '../../harness/net.js'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'
import { type RedisProxy, redisProxy } from './redis-proxy.js'
import { until } from './wait.js'

// How long the probe waits for Redis to answer, or (under CI=true) to start answering: a busy machine answers late.
const PATIENCE_MS = 30_000
// A refusal is definite (nothing listens there) unless Redis is required and may still be starting.
const DEFINITE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNRESET'])

/** Rejects with the connection's own error (ECONNREFUSED, say) where ioredis's says only that it closed. */
async function ping (url: string, timeoutMs: number): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: timeoutMs, commandTimeout: timeoutMs, maxRetriesPerRequest: 0, retryStrategy: () => null })
  let cause: unknown
  redis.on('error', (error) => { cause = error })
  try {
    await redis.connect()
    await redis.ping()
  } catch (error) {
    throw cause ?? error
  } finally {
    redis.disconnect()
  }
}

/**
 * Why Redis at `url` is not there to test against, or undefined when it answers. A slow answer is waited for (up to
 * 30 s), never taken for an absent Redis; a refusal ends the wait at once, unless `awaitStart` says Redis is required
 * and may be starting still, when refusals are retried for as long.
 */
export async function redisProblem (url: string, { awaitStart }: { awaitStart: boolean }): Promise<string | undefined> {
  const givesUp = Date.now() + PATIENCE_MS
  for (;;) {
    try {
      await ping(url, Math.max(givesUp - Date.now(), 1))
      return undefined
    } catch (error) {
      const { code, message } = error as NodeJS.ErrnoException
      const definite = code !== undefined && DEFINITE.has(code) && !awaitStart
      if (definite || Date.now() >= givesUp) return `${message}${definite ? '' : ` (waited ${PATIENCE_MS / 1000} s)`}`
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
}

/**
 * Whether Redis tests run: when Redis answers. Under CI=true a Redis that does not answer within 30 s fails the run
 * rather than skipping its tests; elsewhere they are skipped, with one line saying why and how to start Redis.
 */
export async function redisSkip (): Promise<string | false> {
  const ci = process.env.CI === 'true'
  const problem = await redisProblem(REDIS_URL, { awaitStart: ci })
  if (problem === undefined) return false
  if (ci) throw new Error(`Redis at ${REDIS_URL} did not answer (${problem}), and CI=true needs it`)
  const reason = `Redis at ${REDIS_URL} did not answer (${problem}): start one with \`redis-server --save '' --appendonly no\` (or set REDIS_URL)`
  console.log(`# skipping the Redis tests of ${process.argv[1] ?? 'this file'}: ${reason}`)
  return reason
}

/** A store's logger for a test that reads no line of it. */
export const SILENT_LOGGER = { warn: (): void => {}, info: (): void => {} }

let prefixes = 0
/** A key prefix no other test uses; every key under it is deleted when `t` ends. */
export function redisKeyPrefix (t: Test): string {
  prefixes += 1
  const prefix = `items-service-test:${process.pid}:${prefixes}:`
  t.teardown(async () => { await deleteKeys(prefix) })
  return prefix
}

/**
 * A Redis server of the test's own, on a free port, keeping nothing on disk, with `settings` of its own (as
 * redis-server's arguments); `stop` and `start` it at will.
 */
export interface OwnRedis {
  url: string
  start: () => Promise<void>
  /** Sends the server a signal: SIGKILL ends it; SIGSTOP freezes it (until SIGCONT), connections open. */
  signal: (signal: NodeJS.Signals) => void
  stop: () => Promise<void>
}

export async function ownRedis (t: Test, settings: readonly string[] = [], { password }: { password?: string } = {}): Promise<OwnRedis> {
  const port = await freePort()
  let server: ChildProcess | undefined
  const own: OwnRedis = {
    url: `redis://${password === undefined ? '' : `:${password}@`}127.0.0.1:${port}`,
    start: async () => {
      // A replica loads what its primary sends without writing it to a file (in the working directory) first; a
      // primary sends it at once rather than waiting 5 s for more replicas to share the transfer.
      const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--repl-diskless-load', 'swapdb', '--repl-diskless-sync-delay', '0',
        // Bounded, as docs/redis.md asks, past what any test keeps: a start checks the bounds for accounts against it.
        '--maxmemory', '64gb', '--maxmemory-policy', 'noeviction', ...(password === undefined ? [] : ['--requirepass', password, '--masterauth', password]), ...settings], { stdio: ['ignore', 'pipe', 'inherit'] })
      server = child
      let output = ''
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          output += chunk.toString()
          if (output.includes('Ready to accept connections')) resolve()
        })
        child.once('exit', (code) => { reject(new Error(`redis-server exited with ${code}: ${output}`)) })
        child.once('error', reject)
      })
      child.stdout.resume()
    },
    signal: (signal) => { server?.kill(signal) },
    stop: async () => {
      if (server === undefined || server.exitCode !== null || server.signalCode !== null) return
      const exited = once(server, 'exit')
      server.kill('SIGKILL')
      await exited
    }
  }
  t.teardown(own.stop)
  await own.start()
  return own
}

/**
 * A primary and a replica of the test's own, once the replica acknowledges the primary's writes: a replica whose
 * link is up is counted by WAIT only once the primary has its first acknowledgement (up to a second later). Both
 * have a password of their own, as a Sentinel deployment's servers do, so that a sentinel or a replica of another
 * test that finds one at an address it remembers (a port freed and taken again) cannot command it: without one, in
 * full runs of the suite, this primary's first write was at times left unacknowledged (504).
 */
export async function primaryAndReplica (t: Test): Promise<{ primary: OwnRedis, replica: OwnRedis }> {
  const password = randomUUID()
  const primary = await ownRedis(t, [], { password })
  const replica = await ownRedis(t, ['--replicaof', '127.0.0.1', new URL(primary.url).port], { password })
  const client = new Redis(primary.url)
  try {
    await until('the replica to acknowledge a write', async () => {
      await client.incr('test:replicated')
      return await client.wait(1, 100) >= 1
    })
  } finally {
    client.disconnect()
  }
  return { primary, replica }
}

/**
 * A Sentinel deployment of the test's own: a primary, three replicas and three sentinels (quorum 2) on free ports,
 * with Sentinel's timings short (a primary silent for SENTINEL_DOWN_AFTER_MS is down, unless `downAfterMs` says). Three replicas, so that after
 * a primary killed and one paused, one is left to acknowledge writes while the paused one comes back (Sentinel makes
 * a returning primary a replica only after it has reported itself a primary for 8 s). Each server is an OwnRedis,
 * to kill or pause.
 */
export interface SentinelDeployment {
  readonly name: string
  /** REDIS_URL for an instance that follows it: the servers' password (the sentinels ask for none). */
  readonly redisUrl: string
  /** With `behindProxy`, what the replicas and the sentinels reach the first primary through (and name it by). */
  readonly proxy: RedisProxy | undefined
  /** `host:port` of each sentinel, as REDIS_SENTINELS takes them. */
  readonly sentinels: string
  /** The servers, the primary first at the start. */
  readonly servers: readonly OwnRedis[]
  /** The server the sentinels name as the primary now. */
  primary: () => Promise<OwnRedis>
  /** Listens, then `announced` resolves on the next `+switch-master` of any sentinel, with when (performance.now()). */
  switched: () => Promise<{ announced: Promise<number> }>
  /** Sends every sentinel a signal: SIGSTOP silences them all (until SIGCONT). */
  signalSentinels: (signal: NodeJS.Signals) => void
  /** How many connections each sentinel has, but for the other sentinels' (the test's and the service's). */
  connections: () => Promise<number[]>
  /**
   * Kills one of its servers, and holds its port for as long as the deployment lives: a server another test started
   * there would be taken by the sentinels, which remember the address, for the lost server come back, and made a
   * replica of this deployment (and the two deployments' sentinels would then find each other).
   */
  kill: (server: OwnRedis) => Promise<void>
  /** Runs a command on the first sentinel. */
  ask: (...args: string[]) => Promise<unknown>
  /** Until every sentinel sees the other two and a replica of the primary, and a replica is in sync with it. */
  settled: () => Promise<void>
}

export const SENTINEL_DOWN_AFTER_MS = 500

export interface DeploymentOptions {
  /** redis-server's arguments for the first primary alone. */
  primarySettings?: readonly string[]
  /** The first primary reached by the replicas and the sentinels through a proxy, to partition them from it. */
  behindProxy?: boolean
  /** How long a primary is silent before the sentinels call it down. */
  downAfterMs?: number
}

export async function sentinelDeployment (t: Test, { primarySettings = [], behindProxy = false, downAfterMs = SENTINEL_DOWN_AFTER_MS }: DeploymentOptions = {}): Promise<SentinelDeployment> {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs')
  const { tmpdir } = await import('node:os')
  const { join } = await import('node:path')
  const name = 'items-primary'
  // The deployment's own password, on its servers and in its sentinels: sentinels of another deployment (another
  // test's, running beside this one) that find one of its servers at an address they remember cannot take it.
  const password = randomUUID()
  const primary = await ownRedis(t, primarySettings, { password })
  const proxy = behindProxy ? await redisProxy(primary.url) : undefined
  if (proxy !== undefined) t.teardown(proxy.close)
  // The port the others know the first primary by.
  const primaryPort = Number(new URL(proxy?.url ?? primary.url).port)
  const servers = [primary]
  for (let index = 0; index < 3; index += 1) servers.push(await ownRedis(t, ['--replicaof', '127.0.0.1', String(primaryPort)], { password }))
  const directory = mkdtempSync(join(tmpdir(), 'items-sentinel-'))
  t.teardown(() => { rmSync(directory, { recursive: true, force: true }) })
  const ports: number[] = []
  const processes: ChildProcess[] = []
  for (let index = 0; index < 3; index += 1) {
    const port = await freePort()
    ports.push(port)
    // Sentinel rewrites its configuration file: one each, in the test's folder.
    const file = join(directory, `sentinel-${port}.conf`)
    writeFileSync(file, [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${directory}`,
      `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 2`,
      `sentinel auth-pass ${name} ${password}`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} 3000`,
      ''
    ].join('\n'))
    const child = spawn('redis-server', [file, '--sentinel'], { stdio: ['ignore', 'pipe', 'inherit'] })
    processes.push(child)
    t.teardown(async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = once(child, 'exit')
      child.kill('SIGKILL')
      await exited
    })
    let output = ''
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString()
        if (output.includes('+monitor master')) resolve()
      })
      child.once('exit', (code) => { reject(new Error(`redis-server --sentinel exited with ${code}: ${output}`)) })
      child.once('error', reject)
    })
    child.stdout.resume()
  }
  // Each sentinel asked on a connection of the test's own; a sentinel stopped at the end makes it fail, unheard.
  const clients = ports.map((port) => new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 }).on('error', () => {}))
  t.teardown(() => { for (const client of clients) client.disconnect() })
  const [first] = clients as [Redis]
  const ask = async (...args: string[]): Promise<unknown> => await first.call(args[0] ?? 'PING', ...args.slice(1))
  const primaryPortNow = async (): Promise<number> => Number(((await first.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as string[])[1])
  const byPort = (port: number): OwnRedis => {
    const server = port === primaryPort ? primary : servers.find((own) => Number(new URL(own.url).port) === port)
    if (server === undefined) throw new Error(`the sentinels name a primary on ${port}, none of the test's servers`)
    return server
  }
  return {
    name,
    redisUrl: `redis://:${password}@127.0.0.1`,
    proxy,
    sentinels: ports.map((port) => `127.0.0.1:${port}`).join(','),
    servers,
    primary: async () => byPort(await primaryPortNow()),
    switched: async () => {
      const listeners = clients.map((client) => client.duplicate().on('error', () => {}))
      await Promise.all(listeners.map(async (listener) => await listener.subscribe('+switch-master')))
      const announced = Promise.race(listeners.map(async (listener) => await once(listener, 'message').then(() => performance.now())))
      return { announced: announced.finally(() => { for (const listener of listeners) listener.disconnect() }) }
    },
    kill: async (server) => {
      await server.stop()
      const holder = createServer((socket) => { socket.destroy() })
      await new Promise<void>((resolve, reject) => holder.once('error', reject).listen(Number(new URL(server.url).port), '127.0.0.1', resolve))
      t.teardown(() => { holder.close() })
    },
    ask,
    signalSentinels: (signal) => { for (const child of processes) child.kill(signal) },
    // Each sentinel's links to the others (named sentinel-…) come up in their own time: not counted.
    connections: async () => await Promise.all(clients.map(async (client) => (await client.client('LIST') as string).split('\n').filter((line) => line !== '' && !line.includes(' name=sentinel-')).length)),
    settled: async () => {
      let last = ''
      await until(() => `the sentinels to settle (${last})`, async () => {
        const port = await primaryPortNow()
        const field = (fields: string[], key: string): string | undefined => fields[fields.indexOf(key) + 1]
        const views = await Promise.all(clients.map(async (client) => [
          (await client.call('SENTINEL', 'SENTINELS', name) as unknown[]).length,
          (await client.call('SENTINEL', 'REPLICAS', name) as string[][]).filter((fields) => field(fields, 'flags') === 'slave' && field(fields, 'master-port') === String(port)).length
        ]))
        const inSync = await Promise.all(servers.filter((own) => Number(new URL(own.url).port) !== port).map(async (own) => {
          const server = new Redis(own.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
          server.on('error', () => {})
          const info = await server.info('replication').catch(() => '')
          server.disconnect()
          return info.includes(`master_port:${port}\r`) && info.includes('master_link_status:up')
        }))
        last = `primary ${port}, each sentinel's [sentinels, replicas] ${JSON.stringify(views)}, replicas in sync ${inSync.filter(Boolean).length}`
        return views.every(([others, seen]) => others === 2 && seen !== undefined && seen >= 1) && inSync.some(Boolean)
      }, { everyMs: 100 })
    }
  }
}

// A change committed by the decoded commit, or as its own compiled script (the two ways `commit` sends one).
export const COMMIT_FORMS = {
  decoded: async (redis: Redis, change: Change, limitCounter: string, ...prelude: Array<string | number>): Promise<Limited<Refused | Held>> =>
    await redis.commit(...change.keys(limitCounter), ...prelude, change.structure, ...change.values),
  compiled: async (redis: Redis, change: Change, limitCounter: string, ...prelude: Array<string | number>): Promise<Limited<Refused | Held>> => {
    const [numberOfKeys, ...keys] = change.keys(limitCounter)
    const lua = compiledChange(change.parts)
    if (lua === undefined) throw new Error(`a change the decoded commit alone makes: ${change.structure}`)
    const reply: unknown = await redis.eval(lua, numberOfKeys, ...keys, ...prelude, ...change.values)
    return reply as Limited<Refused | Held>
  }
}
