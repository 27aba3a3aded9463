// The whole spec walked the way a client team would: a real server on an ephemeral port and openapi-fetch typed by
// the contract's generated types (generated/openapi.ts). A contract change that breaks these calls fails to compile; a server
// that breaks the contract fails the middleware's check.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import createClient from 'openapi-fetch'
import type { paths } from '../generated/openapi.js'
import { buildTestApp, contractMiddleware, rateLimitItems } from './helper.js'
import { redisKeyPrefix, redisSkip } from './redis.js'

t.test('a client team walks the whole spec', async (t) => {
  const app = await buildTestApp(t)
  const client = createClient<paths>({ baseUrl: await app.listen({ host: '127.0.0.1', port: 0 }) })
  client.use(contractMiddleware)
  const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } })

  const password = 'correct horse battery staple'
  const ada = await client.POST('/v1/auth/register', { body: { email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' } })
  t.equal(ada.response.status, 201)
  t.equal(ada.data?.user.role, 'contributor')
  const grace = await client.POST('/v1/auth/register', { body: { email: 'grace@example.com', password, firstName: 'Grace', lastName: 'Hopper', role: 'viewer' } })
  t.equal(grace.data?.user.role, 'viewer')
  const duplicate = await client.POST('/v1/auth/register', { body: { email: 'ADA@example.com', password, firstName: 'A', lastName: 'L', role: 'viewer' } })
  t.equal(duplicate.error?.code, 'EMAIL_ALREADY_REGISTERED')

  const login = await client.POST('/v1/auth/login', { body: { email: 'ada@example.com', password } })
  t.equal(login.response.status, 200)
  const wrong = await client.POST('/v1/auth/login', { body: { email: 'ada@example.com', password: 'not it' } })
  t.equal(wrong.error?.code, 'INVALID_CREDENTIALS')
  const refreshed = await client.POST('/v1/auth/refresh', { body: { refreshToken: login.data?.refreshToken ?? '' } })
  t.equal(refreshed.response.status, 200)
  const contributor = refreshed.data?.accessToken ?? ''
  const viewer = grace.data?.accessToken ?? ''

  const created = await client.POST('/v1/items', { ...bearer(contributor), body: { name: 'Difference engine', description: 'Mechanical.' } })
  t.equal(created.response.status, 201)
  t.equal(created.response.headers.get('location'), `/v1/items/${created.data?.id}`)
  const itemId = created.data?.id ?? ''
  for (let index = 0; index < 4; index += 1) await client.POST('/v1/items', { ...bearer(contributor), body: { name: `Part ${index}` } })
  t.equal((await client.POST('/v1/items', { ...bearer(viewer), body: { name: 'x' } })).error?.code, 'FORBIDDEN')
  t.equal((await client.POST('/v1/items', { ...bearer(contributor), body: { name: '' } })).error?.code, 'VALIDATION_ERROR')

  const firstPage = await client.GET('/v1/items', { ...bearer(viewer), params: { query: { page: 1, pageSize: 2 } } })
  t.same(firstPage.data?.pagination, { page: 1, pageSize: 2, total: 5 })
  t.equal(firstPage.data?.data[0]?.id, itemId, 'oldest first')
  const lastPage = await client.GET('/v1/items', { ...bearer(viewer), params: { query: { page: 3, pageSize: 2 } } })
  t.equal(lastPage.data?.data.length, 1)
  t.equal((await client.GET('/v1/items', { ...bearer(viewer), params: { query: { pageSize: 101 } } })).error?.code, 'VALIDATION_ERROR')

  const fetched = await client.GET('/v1/items/{itemId}', { ...bearer(viewer), params: { path: { itemId } } })
  t.same(fetched.data, created.data)
  const tag = fetched.response.headers.get('etag') ?? ''
  const unchanged = await client.GET('/v1/items/{itemId}', { ...bearer(viewer), params: { path: { itemId }, header: { 'If-None-Match': tag } } })
  t.equal(unchanged.response.status, 304)
  const edited = await client.PATCH('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId }, header: { 'If-Match': tag } }, body: { name: 'Analytical engine' } })
  t.equal(edited.data?.name, 'Analytical engine')
  const lostUpdate = await client.PATCH('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId }, header: { 'If-Match': tag } }, body: { name: 'Overwritten' } })
  t.equal(lostUpdate.error?.code, 'PRECONDITION_FAILED', 'an edit from a stale read is refused')
  const archived = await client.PATCH('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId } }, body: { status: 'archived' } })
  t.equal(archived.data?.status, 'archived')
  const adaId = ada.data?.user.id ?? ''
  const archivedOfAda = await client.GET('/v1/items', { ...bearer(viewer), params: { query: { status: 'archived', contributorId: adaId } } })
  t.same(archivedOfAda.data?.data.map((item) => item.id), [itemId], 'a filtered list')
  t.equal((await client.GET('/v1/items', { ...bearer(viewer), params: { query: { status: 'active' } } })).data?.pagination.total, 4, 'counting the filtered set')
  const reactivated = await client.PATCH('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId } }, body: { status: 'active' } })
  t.equal(reactivated.data?.status, 'active')
  t.equal((await client.PATCH('/v1/items/{itemId}', { ...bearer(viewer), params: { path: { itemId } }, body: { name: 'x' } })).error?.code, 'FORBIDDEN')

  t.equal((await client.DELETE('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId } } })).response.status, 204)
  t.equal((await client.GET('/v1/items/{itemId}', { ...bearer(viewer), params: { path: { itemId } } })).error?.code, 'NOT_FOUND')
  t.equal((await client.DELETE('/v1/items/{itemId}', { ...bearer(contributor), params: { path: { itemId } } })).error?.code, 'NOT_FOUND')

  t.equal((await client.POST('/v1/auth/logout', bearer(contributor))).response.status, 204)
  const afterLogout = await client.GET('/v1/items', bearer(contributor))
  t.equal(afterLogout.error?.code, 'INVALID_TOKEN')
  t.equal(afterLogout.response.headers.get('www-authenticate')?.startsWith('Bearer'), true)
  t.equal((await client.GET('/v1/items', {})).error?.code, 'AUTHENTICATION_REQUIRED')

  t.same((await client.GET('/health/ready')).data, { status: 'ok' })
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
