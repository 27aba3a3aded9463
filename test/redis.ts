// Tests that need Redis: where it is (REDIS_URL), and a key prefix of their own that is deleted afterwards.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { freePort } from './net.js'

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'

async function reachable (url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, connectTimeout: 1000, maxRetriesPerRequest: 0, retryStrategy: () => null })
  redis.on('error', () => {})
  try {
    await redis.connect()
    return await redis.ping() === 'PONG'
  } catch {
    return false
  } finally {
    redis.disconnect()
  }
}

/**
 * Whether Redis tests run: when Redis is reachable. Under CI=true an unreachable Redis fails the run rather than
 * skipping its tests; elsewhere they are skipped, with one line saying how to start Redis.
 */
export async function redisSkip (): Promise<string | false> {
  if (await reachable(REDIS_URL)) return false
  if (process.env.CI === 'true') throw new Error(`Redis is unreachable at ${REDIS_URL}, and CI=true needs it`)
  const reason = `Redis is unreachable at ${REDIS_URL}: start one with \`redis-server --save '' --appendonly no\` (or set REDIS_URL)`
  console.log(`# skipping the Redis tests of ${process.argv[1] ?? 'this file'}: ${reason}`)
  return reason
}

let prefixes = 0
/** A key prefix no other test uses; every key under it is deleted when `t` ends. */
export function redisKeyPrefix (t: Test): string {
  prefixes += 1
  const prefix = `items-service-test:${process.pid}:${prefixes}:`
  t.teardown(async () => { await deleteKeys(prefix) })
  return prefix
}

export async function deleteKeys (prefix: string, url = REDIS_URL): Promise<void> {
  const redis = new Redis(url)
  try {
    const batches: AsyncIterable<string[]> = redis.scanStream({ match: `${prefix}*`, count: 1000 })
    for await (const keys of batches) {
      if (keys.length > 0) await redis.unlink(...keys)
    }
  } finally {
    redis.disconnect()
  }
}

/** A Redis server of the test's own, on a free port, keeping nothing on disk; `stop` and `start` it at will. */
export interface OwnRedis {
  url: string
  start: () => Promise<void>
  /** Sends the server a signal: SIGKILL ends it; SIGSTOP freezes it (until SIGCONT), connections open. */
  signal: (signal: NodeJS.Signals) => void
  stop: () => Promise<void>
}

export async function ownRedis (t: Test): Promise<OwnRedis> {
  const port = await freePort()
  let server: ChildProcess | undefined
  const own: OwnRedis = {
    url: `redis://127.0.0.1:${port}`,
    start: async () => {
      const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'inherit'] })
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
