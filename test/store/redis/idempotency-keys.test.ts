// A create's Idempotency-Key on Redis: recorded by the commit that makes the item, for every instance alike.
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import t from 'tap'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { connectRedisStore } from '../../../src/store/redis/connection.js'
import { redisKeys } from '../../../src/store/redis/keys.js'
import { build } from '../../support/app.js'
import { redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../../support/redis.js'
import { account, item } from '../conformance/fixtures.js'

const skip = await redisSkip()

t.test('a create made with a key on one instance is answered to its retry on another, replayed, and each forgets the oldest key past the bound', { skip }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t), MAX_IDEMPOTENCY_KEYS_PER_USER: '2' }
  const [a, b] = [await build(t, shared), await build(t, shared)]
  const { accessToken } = await a.register()
  const create = async (api: typeof a, key: string) => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': key } })
  const first = await create(a, 'first')
  const retried = await create(b, 'first')
  t.same([retried.statusCode, retried.headers['idempotent-replayed'], retried.json()], [201, 'true', first.json()])
  await create(b, 'second')
  await create(a, 'third')
  t.same([(await create(b, 'third')).headers['idempotent-replayed'], (await create(a, 'second')).headers['idempotent-replayed']], ['true', 'true'], 'the two newest kept')
  const again = await create(b, 'first')
  t.same([again.statusCode, again.headers['idempotent-replayed']], [201, undefined], 'the oldest forgotten: created again')
  t.equal((await a.call('listItems', { token: accessToken })).json().pagination.total, 4)
})

// During a rolling upgrade, an instance of an earlier release claims a key before its create runs.
t.test('a key that a release before 1.2.0 claimed for a request still running is 409 IDEMPOTENCY_KEY_IN_USE, and creates nothing', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix })
  const { accessToken, user } = await api.register()
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  await redis.set(`${redisKeys(prefix).idempotencyKey}${user.id}:claimed`, JSON.stringify({ token: randomUUID(), fingerprint: 'its body' }), 'PX', 60_000)
  const response = await api.call('createItem', { token: accessToken, body: { name: 'n' }, headers: { 'idempotency-key': 'claimed' } })
  t.same([response.statusCode, response.json().code], [409, 'IDEMPOTENCY_KEY_IN_USE'])
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 0)
})

t.test('a record the sweep forgot (its time passed) while its name stays among its user\'s keys: a write making room, and the account\'s removal, pass over it', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10, accounts: { accounts: 10, quotaBytes: 700 } })
  t.teardown(async () => { await store.close() })
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const keys = redisKeys(prefix)
  const userId = await account(store.users)
  for (const key of ['past', 'kept']) {
    const made = await store.items.add(item(userId), undefined, { userId, key, fingerprint: 'f' })
    await store.items.remove(made!.id, () => {})
  }
  // The record of `past` is due: the sweep forgets it, and its name stays among the user's keys until they go.
  await redis.zadd(keys.recordExpiries, 0, `${keys.idempotencyKey}${userId}:past`)
  t.equal(await store.idempotencyKeys.sweep(Date.now(), 100), 1)
  t.equal(await redis.zcard(`${keys.idempotencyKeys}${userId}`), 2)
  // An item of 500 bytes (its JSON with an empty description is 230) fits once the record of `kept` is forgotten.
  const large = await store.items.add(item(userId, { description: 'd'.repeat(270) }))
  t.ok(large, 'made, room made')
  t.same(await store.usage(), { accounts: 1, heldBytes: 500 }, 'its own bytes alone: the record of kept forgotten for it')
  await store.items.remove(large!.id, () => {})
  t.ok(await store.accounts.remove(userId))
  t.same(await store.usage(), { accounts: 0, heldBytes: 0 }, 'nothing held, nothing given back twice')
  t.same(await redis.keys(`${prefix}idempotency-key*`), [], 'none of its keys left')
})
