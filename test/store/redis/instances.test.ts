// Three service processes on one Redis, a scenario spread across them with no stickiness: they behave as one.
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { newUser, type Schemas } from '../../support/api.js'
import { type Server, start } from '../../support/processes.js'
import { redisKeyPrefix, redisSkip } from '../../support/redis.js'

const skip = await redisSkip()

interface Answer<Body> { status: number, body: Body }

t.test('three instances on one Redis serve one catalogue', { skip }, async (t) => {
  const env = {
    STORE: 'redis',
    REDIS_KEY_PREFIX: redisKeyPrefix(t),
    RATE_LIMIT: 'on',
    RATE_LIMIT_REGISTER: '1000',
    RATE_LIMIT_WRITES: '1000',
    REFRESH_REUSE_LEEWAY_SECONDS: '1'
  }
  const instances: Server[] = await Promise.all([start(env), start(env), start(env)])
  t.teardown(() => { for (const instance of instances) instance.process.kill('SIGKILL') })
  const [a, b, c] = [0, 1, 2]
  // The body as the contract types it for a success; the tests read no error body.
  const send = async <Body = undefined>(instance: number, method: string, path: string, body?: unknown, token?: string): Promise<Answer<Body>> => {
    const headers: Record<string, string> = {}
    if (body !== undefined) headers['content-type'] = 'application/json'
    if (token !== undefined) headers.authorization = `Bearer ${token}`
    const response = await fetch(`${instances[instance]!.url}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
    const text = await response.text()
    return { status: response.status, body: (text === '' ? undefined : JSON.parse(text)) as Body }
  }
  const spread = <T>(count: number, task: (instance: number, index: number) => Promise<T>): Promise<T[]> =>
    Promise.all(Array.from({ length: count }, async (_, index) => await task(index % 3, index)))

  const ada = newUser()
  const registered = await send(a, 'POST', '/v1/auth/register', ada)
  t.equal(registered.status, 201, 'registered on A')
  const signedIn = await send<Schemas['AuthResponse']>(b, 'POST', '/v1/auth/login', { email: ada.email, password: ada.password })
  t.equal(signedIn.status, 200, 'signed in on B')
  const { accessToken } = signedIn.body
  const created = await send<Schemas['Item']>(c, 'POST', '/v1/items', { name: 'Made on C' }, accessToken)
  t.equal(created.status, 201, 'created on C')
  const listed = await send<Schemas['ItemList']>(a, 'GET', '/v1/items', undefined, accessToken)
  t.same(listed.body.pagination.total, 1)
  t.same(listed.body.data, [created.body], 'listed on A')

  t.equal((await send(b, 'POST', '/v1/auth/logout', undefined, accessToken)).status, 204, 'logged out on B')
  t.same([(await send(a, 'GET', '/v1/items', undefined, accessToken)).status, (await send(c, 'GET', '/v1/items', undefined, accessToken)).status],
    [401, 401], 'the token is refused on A and C at once')

  const session = (await send<Schemas['AuthResponse']>(a, 'POST', '/v1/auth/login', { email: ada.email, password: ada.password })).body
  const rotated = await send<Schemas['AuthResponse']>(a, 'POST', '/v1/auth/refresh', { refreshToken: session.refreshToken })
  t.equal(rotated.status, 200, 'refreshed on A')
  await sleep(1100)
  t.equal((await send(c, 'POST', '/v1/auth/refresh', { refreshToken: session.refreshToken })).status, 401, 'the replaced token replayed on C after the leeway')
  t.equal((await send(b, 'POST', '/v1/auth/refresh', { refreshToken: rotated.body.refreshToken })).status, 401, 'the session has ended: its newest refresh token is refused on B')
  t.equal((await send(b, 'GET', '/v1/items', undefined, rotated.body.accessToken)).status, 401, 'and its access token')

  const contested = newUser()
  const registrations = await spread(20, async (instance) => (await send(instance, 'POST', '/v1/auth/register', contested)).status)
  t.same(registrations.sort(), [201, ...Array<number>(19).fill(409)], 'one email registered 20 times over three instances: exactly one 201')

  const { accessToken: writer } = (await send<Schemas['AuthResponse']>(b, 'POST', '/v1/auth/register', newUser())).body
  const total = async (instance: number, token: string): Promise<number> =>
    (await send<Schemas['ItemList']>(instance, 'GET', '/v1/items', undefined, token)).body.pagination.total
  const before = await total(a, writer)
  const creates = await spread(60, async (instance, index) => await send<Schemas['Item']>(instance, 'POST', '/v1/items', { name: `item ${index}` }, writer))
  t.ok(creates.every(({ status }) => status === 201), '60 creates over three instances')
  t.equal(new Set(creates.map(({ body }) => body.id)).size, 60, '60 distinct ids')
  t.equal(await total(c, writer), before + 60, 'the total grew by 60')

  const raced = creates[0]!.body
  const [edit, removal] = await Promise.all([
    send(a, 'PATCH', `/v1/items/${raced.id}`, { name: 'edited' }, writer),
    send(b, 'DELETE', `/v1/items/${raced.id}`, undefined, writer)
  ])
  t.equal(removal.status, 204, 'the delete on B succeeded')
  t.ok(edit.status === 200 || edit.status === 404, `the edit on A either came first or found nothing (${edit.status})`)
  t.same(await spread(3, async (instance) => (await send(instance, 'GET', `/v1/items/${raced.id}`, undefined, writer)).status), [404, 404, 404])

  const guessed = newUser()
  await send(c, 'POST', '/v1/auth/register', guessed)
  const logins = []
  for (let attempt = 0; attempt < 11; attempt += 1) {
    logins.push((await send(attempt % 3, 'POST', '/v1/auth/login', { email: guessed.email, password: 'not the password' })).status)
  }
  t.same(logins, [...Array<number>(10).fill(401), 429], 'the 11th sign-in for one account, over three instances, is refused')

  const killed = once(instances[c]!.process, 'exit')
  instances[c]!.process.kill('SIGKILL')
  await killed
  const survivor = (await send<Schemas['AuthResponse']>(a, 'POST', '/v1/auth/login', { email: ada.email, password: ada.password })).body
  t.equal((await send(b, 'POST', '/v1/items', { name: 'after the kill' }, survivor.accessToken)).status, 201, 'B creates after C died')
  const totalNow = await total(a, survivor.accessToken)
  t.equal(totalNow, before + 60, 'A sees everything: 60, one deleted, one added')
  instances[c] = await start(env)
  const seenByRestarted = await send<Schemas['ItemList']>(c, 'GET', '/v1/items', undefined, survivor.accessToken)
  t.equal(seenByRestarted.status, 200, 'the restarted instance accepts a token another one issued')
  t.equal(seenByRestarted.body.pagination.total, totalNow, 'and sees everything')
})
