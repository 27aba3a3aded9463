// The whole spec walked the way a client team would: a real server on an ephemeral port and the official client
// (clients/typescript/), whose calls are typed by the contract; the server's own limits and replays through
// openapi-fetch alone, which retries nothing. A contract change that breaks these calls fails to compile; a server
// that breaks the contract fails the middleware's check.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import createClient from 'openapi-fetch'
import type { paths } from '../generated/openapi.js'
import { createItemsClient, type ItemsClient, ok } from '../clients/typescript/src/index.js'
import { rateLimitItems } from './support/api.js'
import { buildTestApp } from './support/app.js'
import { contractMiddleware } from './support/contract-checks.js'
import { redisKeyPrefix, redisSkip } from './support/redis.js'

t.test('a client team walks the whole spec with the official client', async (t) => {
  const app = await buildTestApp(t)
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 })
  // One client per user, as each signs in; every answer is checked against the contract.
  const signedIn = (): ItemsClient => {
    const client = createItemsClient({ baseUrl })
    client.api.use(contractMiddleware)
    return client
  }
  const [ada, grace, anonymous] = [signedIn(), signedIn(), signedIn()]

  const password = 'correct horse battery staple'
  const adaSession = await ada.register({ email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' })
  t.equal(adaSession.user.role, 'contributor')
  t.equal((await grace.register({ email: 'grace@example.com', password, firstName: 'Grace', lastName: 'Hopper', role: 'viewer' })).user.role, 'viewer')
  await t.rejects(anonymous.register({ email: 'ADA@example.com', password, firstName: 'A', lastName: 'L', role: 'viewer' }), { status: 409, code: 'EMAIL_ALREADY_REGISTERED' })
  await t.rejects(anonymous.signIn('ada@example.com', 'not it'), { status: 401, code: 'INVALID_CREDENTIALS' })
  const again = await ada.signIn('ada@example.com', password)
  t.not(again.refreshToken, adaSession.refreshToken, 'a new session')

  const created = await ada.api.POST('/v1/items', { body: { name: 'Difference engine', description: 'Mechanical.' } })
  t.equal(created.response.status, 201)
  t.equal(created.response.headers.get('location'), `/v1/items/${created.data?.id}`)
  const itemId = created.data?.id ?? ''
  for (let index = 0; index < 4; index += 1) await ok(ada.api.POST('/v1/items', { body: { name: `Part ${index}` } }))
  await t.rejects(ok(grace.api.POST('/v1/items', { body: { name: 'x' } })), { status: 403, code: 'FORBIDDEN' })
  await t.rejects(ok(ada.api.POST('/v1/items', { body: { name: '' } })), { status: 400, code: 'VALIDATION_ERROR', details: [{ field: 'body.name' }] })

  const firstPage = await ok(grace.api.GET('/v1/items', { params: { query: { page: 1, pageSize: 2 } } }))
  t.same(firstPage.pagination, { page: 1, pageSize: 2, total: 5 })
  t.equal(firstPage.data[0]?.id, itemId, 'oldest first')
  t.equal((await ok(grace.api.GET('/v1/items', { params: { query: { page: 3, pageSize: 2 } } }))).data.length, 1)
  await t.rejects(ok(grace.api.GET('/v1/items', { params: { query: { pageSize: 101 } } })), { code: 'VALIDATION_ERROR' })

  const fetched = await grace.api.GET('/v1/items/{itemId}', { params: { path: { itemId } } })
  t.same(fetched.data, created.data)
  const tag = fetched.response.headers.get('etag') ?? ''
  const unchanged = await grace.api.GET('/v1/items/{itemId}', { params: { path: { itemId }, header: { 'If-None-Match': tag } } })
  t.equal(unchanged.response.status, 304)
  const edited = await ok(ada.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId }, header: { 'If-Match': tag } }, body: { name: 'Analytical engine' } }))
  t.equal(edited.name, 'Analytical engine')
  await t.rejects(ok(ada.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId }, header: { 'If-Match': tag } }, body: { name: 'Overwritten' } })),
    { status: 412, code: 'PRECONDITION_FAILED' }, 'an edit from a stale read is refused')
  t.equal((await ok(ada.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId } }, body: { status: 'archived' } }))).status, 'archived')
  const archivedOfAda = await ok(grace.api.GET('/v1/items', { params: { query: { status: 'archived', contributorId: adaSession.user.id } } }))
  t.same(archivedOfAda.data.map((item) => item.id), [itemId], 'a filtered list')
  t.equal((await ok(grace.api.GET('/v1/items', { params: { query: { status: 'active' } } }))).pagination.total, 4, 'counting the filtered set')
  t.equal((await ok(ada.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId } }, body: { status: 'active' } }))).status, 'active')
  await t.rejects(ok(grace.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId } }, body: { name: 'x' } })), { code: 'FORBIDDEN' })

  t.equal((await ada.api.DELETE('/v1/items/{itemId}', { params: { path: { itemId } } })).response.status, 204)
  await t.rejects(ok(grace.api.GET('/v1/items/{itemId}', { params: { path: { itemId } } })), { status: 404, code: 'NOT_FOUND' })
  await t.rejects(ok(ada.api.DELETE('/v1/items/{itemId}', { params: { path: { itemId } } })), { status: 404, code: 'NOT_FOUND' })

  const { accessToken } = again
  await ada.signOut()
  t.equal(ada.session, undefined)
  const afterLogout = await anonymous.api.GET('/v1/items', { headers: { authorization: `Bearer ${accessToken}` } })
  t.equal(afterLogout.error?.code, 'INVALID_TOKEN')
  t.equal(afterLogout.response.headers.get('www-authenticate')?.startsWith('Bearer'), true)
  await t.rejects(ok(ada.api.GET('/v1/items')), { status: 401, code: 'AUTHENTICATION_REQUIRED' })

  t.same(await ok(anonymous.api.GET('/health/ready')), { status: 'ok' })
})

t.test('a client backs off before it is refused: RateLimit says what is left, and the 429 when to come back', async (t) => {
  const app = await buildTestApp(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '2' })
  const client = createClient<paths>({ baseUrl: await app.listen({ host: '127.0.0.1', port: 0 }) })
  client.use(contractMiddleware)
  const ada = await client.POST('/v1/auth/register', { body: { email: 'ada@example.com', password: 'correct horse battery staple', firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' } })
  const headers = { authorization: `Bearer ${ada.data?.accessToken ?? ''}` }
  const left: number[] = []
  for (let write = 0; write < 2; write += 1) {
    const created = await client.POST('/v1/items', { headers, body: { name: `Part ${write}` } })
    left.push(rateLimitItems(created.response.headers.get('ratelimit'))['item-writes']?.r ?? -1)
  }
  t.same(left, [1, 0], 'the second write leaves nothing')
  const refused = await client.POST('/v1/items', { headers, body: { name: 'One too many' } })
  t.equal(refused.error?.code, 'RATE_LIMITED')
  t.equal(rateLimitItems(refused.response.headers.get('ratelimit'))['item-writes']?.t, Number(refused.response.headers.get('retry-after')))
})

t.test('a client retries a create with its Idempotency-Key: the first response again, one item; another body is refused', async (t) => {
  const app = await buildTestApp(t)
  const client = createClient<paths>({ baseUrl: await app.listen({ host: '127.0.0.1', port: 0 }) })
  client.use(contractMiddleware)
  const ada = await client.POST('/v1/auth/register', { body: { email: 'ada@example.com', password: 'correct horse battery staple', firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' } })
  const headers = { authorization: `Bearer ${ada.data?.accessToken ?? ''}` }
  const params = { header: { 'Idempotency-Key': randomUUID() } }
  const first = await client.POST('/v1/items', { headers, params, body: { name: 'Difference engine' } })
  const retried = await client.POST('/v1/items', { headers, params, body: { name: 'Difference engine' } })
  t.same([first.response.status, retried.response.status], [201, 201])
  t.same(retried.data, first.data)
  t.equal(retried.response.headers.get('idempotent-replayed'), 'true')
  const reused = await client.POST('/v1/items', { headers, params, body: { name: 'Analytical engine' } })
  t.equal(reused.error?.code, 'IDEMPOTENCY_KEY_REUSED')
  t.equal((await client.GET('/v1/items', { headers })).data?.pagination.total, 1)
})

t.test('two instances on one Redis: a create retried on the other instance gets the first one\'s response', { skip: await redisSkip() }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  const clients = await Promise.all([1, 2].map(async () => {
    const app = await buildTestApp(t, shared)
    const client = createClient<paths>({ baseUrl: await app.listen({ host: '127.0.0.1', port: 0 }) })
    client.use(contractMiddleware)
    return client
  }))
  const [first, second] = clients as [typeof clients[number], typeof clients[number]]
  const ada = await first.POST('/v1/auth/register', { body: { email: 'ada@example.com', password: 'correct horse battery staple', firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' } })
  const headers = { authorization: `Bearer ${ada.data?.accessToken ?? ''}` }
  const params = { header: { 'Idempotency-Key': randomUUID() } }
  const created = await first.POST('/v1/items', { headers, params, body: { name: 'Made on the first' } })
  const replayed = await second.POST('/v1/items', { headers, params, body: { name: 'Made on the first' } })
  t.same([created.response.status, replayed.response.status, replayed.response.headers.get('idempotent-replayed')], [201, 201, 'true'])
  t.same(replayed.data, created.data)
  t.same(replayed.response.headers.get('location'), created.response.headers.get('location'))
  t.equal((await second.GET('/v1/items', { headers })).data?.pagination.total, 1, 'one item, whichever instance is asked')
})
