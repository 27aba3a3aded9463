import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { Writable } from 'node:stream'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import type { Middleware } from 'openapi-fetch'
import t, { type Test } from 'tap'
import { parse } from 'yaml'
import type { components } from '../generated/openapi.js'
import { type RouteDefinition, type RouteOperationId, routes } from '../generated/routes.js'
import { type BuildAppOptions, buildApp } from '../src/app.js'
import { OWASP_HASH_COST } from '../src/auth/hash-cost.js'
import { HashingProcess } from '../src/auth/hashing-process.js'
import { loadConfig } from '../src/config.js'
import { findResponseViolation } from '../src/response-contract.js'
import { CONTRACT_COVERAGE_DIR } from './contract-coverage-records.js'
import { deleteKeys, REDIS_URL, redisKeyPrefix } from './redis.js'

export type Schemas = components['schemas']
export const TEST_JWT_SECRET = 'a-test-secret-that-is-at-least-32-bytes-long'

const seen = new Set<string>()
process.once('exit', () => {
  mkdirSync(CONTRACT_COVERAGE_DIR, { recursive: true })
  const testFile = relative(process.cwd(), process.argv[1] ?? 'unknown')
  writeFileSync(join(CONTRACT_COVERAGE_DIR, `${testFile.replace(/[/\\]/g, '__')}.json`), JSON.stringify({ seen: [...seen] }))
})

function routeFor (method: string, url: string): RouteDefinition | undefined {
  const path = url.split('?')[0] ?? url
  // Like Fastify's router, an empty path parameter still matches: /v1/items/ is getItem with itemId ''.
  return routes.find((route) => route.method === method &&
    new RegExp(`^${route.url.replace(/:[^/]+/g, '[^/]*')}$`).test(path))
}

/** openapi-fetch middleware: checks every response a typed client receives, like Api.inject does. */
export const contractMiddleware: Middleware = {
  async onResponse ({ request, response, schemaPath }) {
    const route = routes.find((candidate) => candidate.method === request.method &&
      candidate.url === schemaPath.replace(/\{([^}]+)\}/g, ':$1'))
    if (route === undefined) throw new ContractViolation(`${request.method} ${schemaPath} is not an operation of the contract`)
    seen.add(`${route.operationId} ${response.status}`)
    const headers = Object.fromEntries(response.headers.entries())
    const violation = findResponseViolation(route, { statusCode: response.status, headers, body: await response.clone().text() })
    if (violation !== undefined) throw new ContractViolation(`${request.method} ${request.url} → ${response.status}: ${violation}`)
    return undefined
  }
}

export class ContractViolation extends Error {
  override name = 'ContractViolation'
}

/** Throws when a response is not one the contract allows for the operation that was called. */
function assertMatchesContract (method: string, url: string, response: LightMyRequestResponse): void {
  const route = routeFor(method, url)
  const where = `${method} ${url} → ${response.statusCode}`
  if (route === undefined) {
    // Outside the contract's paths only the catch-all 404 is expected, in the ErrorResponse shape.
    const body = response.json() as { code?: unknown, message?: unknown }
    if (response.statusCode === 404 && body.code === 'NOT_FOUND' && typeof body.message === 'string') return
    throw new ContractViolation(`${where}: no operation matches and the response is not a NOT_FOUND error`)
  }
  seen.add(`${route.operationId} ${response.statusCode}`)
  const violation = findResponseViolation(route, { statusCode: response.statusCode, headers: response.headers, body: response.body })
  if (violation !== undefined) throw new ContractViolation(`${where}: ${violation}\n${response.body}`)
}

export interface CallOptions {
  params?: Record<string, string>
  query?: Record<string, string | number>
  body?: unknown
  token?: string
  headers?: Record<string, string>
  /** The client's address, as the service sees it (127.0.0.1 when left out). */
  remoteAddress?: string
}

/** Sends requests into the app and checks every response against the contract before a test sees it. */
export class Api {
  constructor (readonly app: FastifyInstance) {}

  async inject (options: InjectOptions & { method: string, url: string }): Promise<LightMyRequestResponse> {
    const response = await this.app.inject(options)
    assertMatchesContract(options.method, options.url, response)
    return response
  }

  /** Calls an operation by its operationId. */
  async call (operationId: RouteOperationId, options: CallOptions = {}): Promise<LightMyRequestResponse> {
    const route = routes.find((candidate) => candidate.operationId === operationId)
    if (route === undefined) throw new Error(`unknown operation ${operationId}`)
    const path = route.url.replace(/:([^/]+)/g, (_match, name: string) => encodeURIComponent(options.params?.[name] ?? ''))
    const query = new URLSearchParams(Object.entries(options.query ?? {}).map(([key, value]): [string, string] => [key, String(value)])).toString()
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    return await this.inject({
      method: route.method,
      url: query === '' ? path : `${path}?${query}`,
      headers,
      ...(options.remoteAddress === undefined ? {} : { remoteAddress: options.remoteAddress }),
      ...(options.body === undefined ? {} : { payload: options.body as object })
    })
  }

  async register (overrides: Partial<Schemas['RegisterRequest']> = {}): Promise<Schemas['AuthResponse']> {
    const response = await this.call('registerUser', { body: newUser(overrides) })
    if (response.statusCode !== 201) throw new Error(`register failed: ${response.body}`)
    return response.json()
  }

  async createItem (token: string, body: Schemas['CreateItemRequest'] = { name: 'An item' }): Promise<Schemas['Item']> {
    const response = await this.call('createItem', { token, body })
    if (response.statusCode !== 201) throw new Error(`createItem failed: ${response.body}`)
    return response.json()
  }
}

let userCount = 0
/** A log stream for `build`'s options that keeps every line written to it. */
export function captureLogs (): { lines: string[], logStream: Writable } {
  const lines: string[] = []
  const logStream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  return { lines, logStream }
}

export function newUser (overrides: Partial<Schemas['RegisterRequest']> = {}): Schemas['RegisterRequest'] {
  userCount += 1
  return {
    email: `user${userCount}-${process.pid}@example.com`,
    password: 'correct horse battery staple',
    firstName: 'Test',
    lastName: `User ${userCount}`,
    role: 'contributor',
    ...overrides
  }
}

// With STORE=redis (.ci/run runs the whole suite so too), every app a test builds keeps its data under a key
// prefix of its own, deleted when the test ends; apps built otherwise share this file's, deleted when it ends.
const store = process.env.STORE ?? 'memory'
const fileKeyPrefix = `items-service-test:${process.pid}:`
if (store === 'redis') t.teardown(async () => { await deleteKeys(fileKeyPrefix) })

/** The settings tests run with unless a test overrides them. */
export const testEnvironment: NodeJS.ProcessEnv = {
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
  REDIS_KEY_PREFIX: fileKeyPrefix
}

/**
 * The items of a RateLimit or RateLimit-Policy field (IETF draft-ietf-httpapi-ratelimit-headers-10), by limit name,
 * each with its parameters (`q`, `w`; `r`, `t`) as numbers.
 */
export function rateLimitItems (field: unknown): Record<string, Record<string, number>> {
  if (typeof field !== 'string') return {}
  return Object.fromEntries(field.split(', ').map((item) => {
    const [name = '', ...parameters] = item.split(';')
    return [JSON.parse(name) as string, Object.fromEntries(parameters.map((parameter) => {
      const [key = '', value] = parameter.split('=')
      return [key, Number(value)]
    }))]
  }))
}

/** Production's password hashing cost, for a test whose point is what a hash costs (with an app's own process). */
export const productionHashCost: NodeJS.ProcessEnv = {
  PASSWORD_HASH_MEMORY_KIB: String(OWASP_HASH_COST.memoryKib),
  PASSWORD_HASH_PASSES: String(OWASP_HASH_COST.passes)
}

export interface ContractOperation {
  operationId: string
  method: string
  /** The path as openapi.yaml writes it, with {parameters}. */
  path: string
}

/** Every operation that openapi.yaml itself declares under `paths`, read from the file, not from generated/. */
export function contractOperations (): ContractOperation[] {
  const document = parse(readFileSync('openapi.yaml', 'utf8')) as { paths: Record<string, Record<string, unknown>> }
  return Object.entries(document.paths).flatMap(([path, pathItem]) => Object.entries(pathItem).flatMap(([method, operation]) =>
    typeof operation === 'object' && operation !== null && 'operationId' in operation
      ? [{ operationId: String(operation.operationId), method: method.toUpperCase(), path }]
      : []))
}

/** Resolves once `holds()` does, looking again every `everyMs`: tap's timeout bounds the wait, not a guess at the machine's speed. */
export async function until (holds: () => boolean, everyMs = 10): Promise<void> {
  while (!holds()) await new Promise((resolve) => setTimeout(resolve, everyMs))
}

/**
 * Runs `work` while the app measures its event loop's delay past `maxEventLoopDelayMs`: every turn of the loop takes
 * 50 ms until the app has measured it, and on until `work` settles, so that no sample taken meanwhile (one each
 * 250 ms, sooner on a busy machine than `work` may end) reads a calm loop.
 */
export async function whileEventLoopOverloaded<T> (app: FastifyInstance, maxEventLoopDelayMs: number, work: () => Promise<T>): Promise<T> {
  let running: Promise<T> | undefined
  let settled = false
  for (;;) {
    if (running === undefined && app.eventLoopDelayMs() > maxEventLoopDelayMs) {
      running = work()
      running.then(() => { settled = true }, () => { settled = true })
    }
    if (running !== undefined && settled) return await running
    const busyUntil = Date.now() + 50
    while (Date.now() < busyUntil) { /* busy */ }
    await new Promise((resolve) => setImmediate(resolve))
  }
}

// One password hashing process for every app a test file builds (starting one takes most of a second under the test
// runner); a test about the process itself asks for the app's own with `hashingProcess: undefined`.
const sharedHashingProcess = new HashingProcess(loadConfig(testEnvironment).passwordHashCost)
t.teardown(async () => { await sharedHashingProcess.close() })

/**
 * The app for one test, configured by testEnvironment and `env`, closed when the test ends; not ready yet, so that a
 * test may add a probe route to it. Every test builds its apps here (embedding.test.ts calls buildApp as embedders do).
 */
export async function buildTestApp (t: Test, env: NodeJS.ProcessEnv = {}, options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const keyPrefix = store === 'redis' && options.store === undefined ? { REDIS_KEY_PREFIX: redisKeyPrefix(t) } : {}
  const app = await buildApp(loadConfig({ ...testEnvironment, ...keyPrefix, ...env }), { hashingProcess: sharedHashingProcess, ...options })
  t.teardown(async () => { await app.close() })
  return app
}

/** The app for one test, ready, with a client that checks every response against the contract. */
export async function build (t: Test, env: NodeJS.ProcessEnv = {}, options: BuildAppOptions = {}): Promise<Api> {
  const app = await buildTestApp(t, env, options)
  await app.ready()
  return new Api(app)
}
