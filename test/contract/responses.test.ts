// The statuses every operation shares (500, 503, 504, 413, 415), exercised on every operation of both contracts from
// one table of valid requests each; together with the other tests this covers every response the contracts document.
import t, { type Test } from 'tap'
import { freePort } from '../../harness/net.js'
import { type RouteOperationId as OperationsOperationId, routes as operationsRoutes } from '../../generated/operations/routes.js'
import { type RouteOperationId, routes } from '../../generated/routes.js'
import type { AppStore } from '../../src/store/sandboxes.js'
import { OutcomeUnknownError, type Store, StoreUnavailableError } from '../../src/store/store.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import { type CallOptions, newUser } from '../support/api.js'
import { build, TEST_JWT_SECRET } from '../support/app.js'
import { whileEventLoopOverloaded } from '../support/wait.js'
import { forgeToken } from '../support/tokens.js'
import { opsCall } from '../support/ops.js'
import { INTERNAL_ERROR_BODY } from '../../src/errors.js'

const ITEM_ID = '00000000-0000-4000-8000-000000000000'
const now = Math.floor(Date.now() / 1000)
// Signed with the test secret; its session exists only where a store says so.
const forgedToken = forgeToken({ alg: 'HS256', typ: 'JWT' }, {
  sub: '00000000-0000-4000-8000-000000000001',
  sid: '00000000-0000-4000-8000-000000000002',
  jti: '00000000-0000-4000-8000-000000000003',
  typ: 'access',
  iss: 'items-service',
  aud: 'items-service',
  iat: now,
  exp: now + 600
}, TEST_JWT_SECRET)

/** A request each operation would accept, given a store that works and a signed-in contributor's token. */
const validRequests = (token: string): Record<RouteOperationId, CallOptions> => ({
  openDocs: {},
  checkLiveness: {},
  checkReadiness: {},
  registerUser: { body: newUser() },
  loginUser: { body: { email: 'someone@example.com', password: 'a password' } },
  refreshTokens: { body: { refreshToken: 'r'.repeat(43) } },
  logoutUser: { token },
  listItems: { token },
  createItem: { token, body: { name: 'n' } },
  getItem: { token, params: { itemId: ITEM_ID } },
  updateItem: { token, params: { itemId: ITEM_ID }, body: { name: 'n' } },
  deleteItem: { token, params: { itemId: ITEM_ID } }
})

const usesStore = routes.filter((route) => !route.operationId.startsWith('check') && route.operationId !== 'openDocs')
const acceptsBody = routes.filter((route) => route.method === 'POST' || route.method === 'PATCH')

// Every part of the store that a request uses fails every call with `error` and has nothing at hand; rate counters
// call back with it. The outbox delivers as the memory store's, but for what the operations API reads and changes of
// it; the sandboxes close.
function failingStore (error: Error): AppStore {
  const failing = async (): Promise<never> => { throw error }
  const broken = new Proxy({}, { get: (_target, operation) => operation === 'cached' ? () => undefined : failing })
  const outbox = createMemoryStore().outbox
  return {
    users: broken as Store['users'],
    sessions: broken as Store['sessions'],
    items: broken as Store['items'],
    idempotencyKeys: broken as Store['idempotencyKeys'],
    accounts: broken as Store['accounts'],
    outbox: new Proxy(outbox, {
      get: (target, operation) => {
        if (operation === 'deadLetters' || operation === 'redeliver') return failing
        const value: unknown = Reflect.get(target, operation)
        return typeof value === 'function' ? value.bind(target) : value
      }
    }),
    usage: failing,
    sandboxes: (settings) => ({ settings, count: failing, list: failing, create: failing, use: failing, reset: failing, delete: failing, abandon: failing, deleteIdle: failing, advanceClock: failing, events: failing, note: failing, journal: failing, onJournal: () => {}, setReceiver: failing, close: async () => {} }),
    rateCounter: () => ({
      incr: (_key, _windowMs, _max, callback) => { callback(new StoreUnavailableError('down')) },
      peek: (_key, _windowMs, callback) => { callback(new StoreUnavailableError('down')) },
      refund: async () => {},
      reset: async () => {}
    }),
    available: () => false,
    now: () => Date.now(),
    close: async () => {}
  }
}

t.test('a store failing with an unexpected error is a 500 INTERNAL_ERROR on every operation that uses it', async (t) => {
  const api = await build(t, {}, { store: failingStore(new Error('a bug in the store')) })
  const validRequest = validRequests(forgedToken)
  for (const route of usesStore) {
    const response = await api.call(route.operationId, validRequest[route.operationId])
    t.equal(response.statusCode, 500, route.operationId)
    t.same(response.json(), INTERNAL_ERROR_BODY)
  }
})

t.test('an unavailable store is a 503 SERVICE_UNAVAILABLE with Retry-After on every operation that uses it, rate limits included', async (t) => {
  for (const rateLimit of ['off', 'on']) {
    const api = await build(t, { RATE_LIMIT: rateLimit }, { store: failingStore(new StoreUnavailableError('Redis is down')) })
    const validRequest = validRequests(forgedToken)
    for (const route of usesStore) {
      const response = await api.call(route.operationId, validRequest[route.operationId])
      t.equal(response.statusCode, 503, `${route.operationId}, RATE_LIMIT=${rateLimit}`)
      t.equal(response.headers['retry-after'], '2')
      t.same(response.json(), { code: 'SERVICE_UNAVAILABLE', message: 'The data store is unavailable; try again shortly.' })
    }
    const ready = await api.call('checkReadiness')
    t.same([ready.statusCode, ready.headers['retry-after']], [503, '2'], 'not ready, and says when to ask again, as its contract says')
  }
})

t.test('an overloaded service sheds every operation with 503 but those that free memory or end access, and the redirect to the docs', async (t) => {
  const api = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  const validRequest = validRequests(forgedToken)
  const neverShed = ['deleteItem', 'logoutUser']
  const responses = await whileEventLoopOverloaded(api.app, 20, async () =>
    await Promise.all(routes.map(async (route) => ({ route, response: await api.call(route.operationId, validRequest[route.operationId]) }))))
  for (const { route, response } of responses) {
    if (route.operationId === 'openDocs') {
      t.equal(response.statusCode, 302, 'openDocs is served')
    } else if (neverShed.includes(route.operationId)) {
      t.equal(response.statusCode, 401, `${route.operationId} is served: its forged token is refused`)
    } else {
      t.equal(response.statusCode, 503, route.operationId)
      t.equal(response.json().code, 'SERVICE_UNAVAILABLE')
    }
  }
})

t.test('every operation that takes a body answers 413 for an oversized one and 415 for one that is not JSON', async (t) => {
  const api = await build(t, { BODY_LIMIT_BYTES: '1024' })
  const validRequest = validRequests((await api.register()).accessToken)
  for (const route of acceptsBody) {
    const request = validRequest[route.operationId]
    const large = await api.call(route.operationId, { ...request, body: { padding: 'x'.repeat(2048) } })
    t.equal(large.statusCode, 413, route.operationId)
    t.equal(large.json().code, 'PAYLOAD_TOO_LARGE')
    const text = await api.call(route.operationId, { ...request, body: 'name=n', headers: { 'content-type': 'text/plain' } })
    t.equal(text.statusCode, 415, route.operationId)
    t.equal(text.json().code, 'UNSUPPORTED_MEDIA_TYPE')
  }
})

const ANY_ID = '00000000-0000-4000-8000-000000000004'
const WEBHOOK = { url: 'https://hooks.example.com/items', secret: `whsec_${Buffer.alloc(24).toString('base64')}` }
/** A body each operation of the operations API would accept (none for those that take none). */
const validOperationsBodies: Record<OperationsOperationId, unknown> = {
  getMetrics: undefined,
  listDeadLetters: undefined,
  redeliverDeadLetters: {},
  listAccounts: undefined,
  removeAccount: undefined,
  listSandboxes: undefined,
  createSandbox: {},
  deleteSandbox: undefined,
  listSandboxEvents: undefined,
  listSandboxJournal: undefined,
  resetSandbox: undefined,
  setSandboxWebhook: WEBHOOK,
  deleteSandboxWebhook: undefined,
  advanceSandboxClock: { seconds: 60 }
}
const operationsUsingStore = operationsRoutes.filter((route) => route.operationId !== 'getMetrics')

/** The operations API of an app whose store fails with `error`, sandboxes on and a webhook subscriber configured. */
async function failingOperations (t: Test, error: Error): Promise<string> {
  const opsPort = await freePort()
  await build(t, { OPS_PORT: String(opsPort), SANDBOXES: 'on', WEBHOOKS: JSON.stringify([WEBHOOK]) }, { store: failingStore(error) })
  return `http://127.0.0.1:${opsPort}`
}

const operationsCall = async (t: Test, ops: string, route: (typeof operationsRoutes)[number], body = validOperationsBodies[route.operationId], contentType?: string): Promise<{ status: number, json: unknown }> =>
  await opsCall(t, ops, route.operationId, route.method, route.url.replace(/:\w+/g, ANY_ID), body, contentType)

t.test('on the operations API, a store failing with an unexpected error is a 500, an unavailable one a 503, and a change whose outcome the store lost a 504, on every operation that uses it', async (t) => {
  const answers = [
    { error: new Error('a bug in the store'), status: 500, code: 'INTERNAL_ERROR', reads: true },
    { error: new StoreUnavailableError('Redis is down'), status: 503, code: 'SERVICE_UNAVAILABLE', reads: true },
    // Only a change, made through the store's write step, learns that its reply was lost; a read's lost reply is a 503.
    { error: new OutcomeUnknownError('its reply was lost'), status: 504, code: 'OUTCOME_UNKNOWN', reads: false }
  ]
  for (const { error, status, code, reads } of answers) {
    const ops = await failingOperations(t, error)
    for (const route of operationsUsingStore.filter((route) => reads || route.method !== 'GET')) {
      const { status: answered, json } = await operationsCall(t, ops, route)
      t.same([answered, (json as { code: string }).code], [status, code], route.operationId)
    }
  }
})

t.test('every operation of the operations API that takes a body answers 413 for an oversized one and 415 for one that is not JSON', async (t) => {
  const ops = await failingOperations(t, new Error('not reached'))
  for (const route of operationsRoutes.filter((route) => validOperationsBodies[route.operationId] !== undefined)) {
    const large = await operationsCall(t, ops, route, { padding: 'x'.repeat(128 * 1024) })
    t.same([large.status, (large.json as { code: string }).code], [413, 'PAYLOAD_TOO_LARGE'], route.operationId)
    const text = await operationsCall(t, ops, route, 'seconds=60', 'text/plain')
    t.same([text.status, (text.json as { code: string }).code], [415, 'UNSUPPORTED_MEDIA_TYPE'], route.operationId)
  }
})

t.test('on both APIs, a path parameter of any length answers the contract\'s 400, never an undeclared 414', async (t) => {
  // Longer than Fastify's default limit on a parameter (100 characters), well within Node's on a request's headers.
  const longId = 'a'.repeat(4096)
  const api = await build(t)
  const validRequest = validRequests((await api.register()).accessToken)
  for (const route of routes.filter((route) => route.url.includes(':'))) {
    const response = await api.call(route.operationId, { ...validRequest[route.operationId], params: { itemId: longId } })
    t.same([response.statusCode, response.json().code], [400, 'VALIDATION_ERROR'], route.operationId)
  }
  const ops = await failingOperations(t, new Error('not reached'))
  for (const route of operationsRoutes.filter((route) => route.url.includes(':'))) {
    const { status, json } = await opsCall(t, ops, route.operationId, route.method, route.url.replace(/:\w+/g, longId), validOperationsBodies[route.operationId])
    t.same([status, (json as { code: string }).code], [400, 'VALIDATION_ERROR'], route.operationId)
  }
})
