// The apps tests build: configured by testEnvironment, closed when their test ends, on the store the run names
// (STORE), sharing one password hashing process per file. Nothing starts until a test builds its first app.
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'
import { type BuildAppOptions, buildApp } from '../../src/app/app.js'
import { OWASP_HASH_COST } from '../../src/auth/hash-cost.js'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { loadConfig } from '../../src/config/config.js'
import { Api } from './api.js'
import { redisKeyPrefix } from './redis.js'

export const TEST_JWT_SECRET = 'a-test-secret-that-is-at-least-32-bytes-long'

/** A log stream for `build`'s options that keeps every line written to it. */
export function captureLogs (): { lines: string[], logStream: Writable } {
  const lines: string[] = []
  const logStream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  return { lines, logStream }
}

// With STORE=redis (.ci/run runs the whole suite so too), every app a test builds keeps its data under a key
// prefix of its own, deleted when the test ends; apps built otherwise share this file's, deleted when it ends.
const store = process.env.STORE ?? 'memory'
const fileKeyPrefix = `items-service-test:${process.pid}:`
let fileKeysTornDown = false
function keysOfTheFileDeletedAtItsEnd (): void {
  if (store !== 'redis' || fileKeysTornDown) return
  fileKeysTornDown = true
  t.teardown(async () => { await deleteKeys(fileKeyPrefix) })
}

const TEST_ENVIRONMENT: NodeJS.ProcessEnv = {
  NODE_ENV: 'test',
  LOG_LEVEL: 'silent',
  RATE_LIMIT: 'off',
  // No load shedding unless a test is about it: on a machine busy with other work a test's request would be shed.
  MAX_EVENT_LOOP_DELAY_MS: '0',
  JWT_SECRET: TEST_JWT_SECRET,
  CONTRACT_STRICT_RESPONSES: '1',
  // The cheapest argon2id hash: a test about hashing's real cost asks for the defaults (and the app's own process).
  PASSWORD_HASH_MEMORY_KIB: '8',
  PASSWORD_HASH_PASSES: '1',
  STORE: store,
  REDIS_URL,
  REDIS_KEY_PREFIX: fileKeyPrefix,
  // Every app of a test file shares its keys on Redis: accounts enough for all of their registrations, and a budget
  // they fit (the machine's Redis, for STORE=redis, is given a maxmemory past them: .ci/run).
  MAX_ACCOUNTS: '10000',
  MAX_HEAP_USED_MIB: '65536'
}

// An app built in the test's process: closing one whose test left a kept-alive connection open waits out the
// drain grace, a quarter of this (a second by default). A server process keeps the default: its shutdown, under a
// loaded machine's pace, flushes traces and deliveries; a test about shutdown sets its own.
const IN_PROCESS: NodeJS.ProcessEnv = { SHUTDOWN_TIMEOUT_MS: '1000' }

/** The settings tests run with unless a test overrides them; on Redis, the file's keys are deleted when it ends. */
export function testEnvironment (): NodeJS.ProcessEnv {
  keysOfTheFileDeletedAtItsEnd()
  return TEST_ENVIRONMENT
}

/** Production's password hashing cost, for a test whose point is what a hash costs (with an app's own process). */
export const productionHashCost: NodeJS.ProcessEnv = {
  PASSWORD_HASH_MEMORY_KIB: String(OWASP_HASH_COST.memoryKib),
  PASSWORD_HASH_PASSES: String(OWASP_HASH_COST.passes)
}

// One password hashing process for every app a test file builds (starting one takes most of a second under the test
// runner); a test about the process itself asks for the app's own with `hashingProcess: undefined`.
let sharedHashingProcess: HashingProcess | undefined
function hashingProcessOfTheFile (): HashingProcess {
  if (sharedHashingProcess === undefined) {
    const hashingProcess = new HashingProcess(loadConfig(TEST_ENVIRONMENT).passwordHashCost)
    t.teardown(async () => { await hashingProcess.close() })
    sharedHashingProcess = hashingProcess
  }
  return sharedHashingProcess
}

/**
 * The app for one test, configured by testEnvironment and `env`, closed when the test ends; not ready yet, so that a
 * test may add a probe route to it. Every test builds its apps here (embedding.test.ts calls buildApp as embedders do).
 */
export async function buildTestApp (t: Test, env: NodeJS.ProcessEnv = {}, options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const keyPrefix = store === 'redis' && options.store === undefined ? { REDIS_KEY_PREFIX: redisKeyPrefix(t) } : {}
  const app = await buildApp(loadConfig({ ...testEnvironment(), ...IN_PROCESS, ...keyPrefix, ...env }), { hashingProcess: hashingProcessOfTheFile(), ...options })
  t.teardown(async () => { await app.close() })
  return app
}

/**
 * An app, ready, that the test closes itself: one of many a property builds and drops, run after run, which
 * closing only when the test ends would keep open all at once.
 */
export async function openApi (env: NodeJS.ProcessEnv = {}): Promise<{ api: Api, close: () => Promise<void> }> {
  const app = await buildApp(loadConfig({ ...testEnvironment(), ...IN_PROCESS, ...env }), { hashingProcess: hashingProcessOfTheFile() })
  await app.ready()
  return { api: new Api(app), close: async () => { await app.close() } }
}

/** The app for one test, ready, with a client that checks every response against the contract. */
export async function build (t: Test, env: NodeJS.ProcessEnv = {}, options: BuildAppOptions = {}): Promise<Api> {
  const app = await buildTestApp(t, env, options)
  await app.ready()
  return new Api(app)
}
