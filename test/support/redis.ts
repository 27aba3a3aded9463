// Tests that need Redis: where it is (REDIS_URL), and a key prefix of their own that is deleted afterwards.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { freePort } from '../../harness/net.js'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'

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

export async function ownRedis (t: Test, settings: readonly string[] = []): Promise<OwnRedis> {
  const port = await freePort()
  let server: ChildProcess | undefined
  const own: OwnRedis = {
    url: `redis://127.0.0.1:${port}`,
    start: async () => {
      const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...settings], { stdio: ['ignore', 'pipe', 'inherit'] })
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
