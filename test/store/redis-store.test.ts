import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { connectRedisStore } from '../../src/store/redis-store.js'
import type { Store } from '../../src/store/store.js'
import { deleteKeys, ownRedis, REDIS_URL, redisKeyPrefix, redisSkip } from '../redis.js'
import { storeConformance } from './conformance.js'

const skip = await redisSkip()
const silent = { warn: () => {}, info: () => {} }

// A store under a fresh prefix, and a raw connection of its own standing for another instance, already connected
// so that what it sends goes out at once.
async function storeBesideAnotherInstance (t: Test): Promise<{ prefix: string, store: Store, other: Redis }> {
  const prefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: silent, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const other = new Redis(REDIS_URL)
  t.teardown(() => { other.disconnect() })
  await other.ping()
  return { prefix, store, other }
}

t.test('the Store contract, on Redis', { skip }, async (t) => {
  storeConformance(t, async (t, options) => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: redisKeyPrefix(t), logger: silent, maxItemsPerContributor: options.maxItemsPerContributor })
    t.teardown(async () => { await store.close() })
    return store
  })
})

t.test('every key the store writes starts with its prefix', { skip }, async (t) => {
  // A database of its own (no other test uses 15), so every key in it is this test's.
  const url = new URL(REDIS_URL)
  url.pathname = '/15'
  const prefix = `items-service-test:${process.pid}:prefixed:`
  t.teardown(async () => { await deleteKeys(prefix, url.href) })
  const store = await connectRedisStore({ url: url.href, keyPrefix: prefix, logger: silent, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const userId = randomUUID()
  const now = Date.now()
  await store.users.add({ id: userId, email: 'a@b.co', emailKey: 'a@b.co', passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'contributor', createdAt: new Date(now).toISOString() })
  await store.sessions.open({ id: randomUUID(), userId, expiresAt: now + 60_000 }, 'token', 20)
  await store.sessions.rotateRefreshToken('token', 'next', now, 5000)
  const added = await store.items.add({ id: randomUUID(), name: 'n', description: null, status: 'active', contributorId: userId, createdAt: '', updatedAt: '' })
  await store.items.update(added!.id, (current) => ({ ...current, name: 'm' }))
  await new Promise((resolve) => { store.rateCounter('limit').incr('key', 60_000, 1, resolve) })
  const redis = new Redis(url.href)
  t.teardown(() => { redis.disconnect() })
  const keys = await redis.keys('*')
  t.ok(keys.length >= 9, `${keys.length} keys`)
  t.same(keys.filter((key) => !key.startsWith(prefix)), [])
})

t.test('an edit that another instance keeps beating gives up after 16 tries with a StoreUnavailableError', { skip }, async (t) => {
  const { prefix, store, other } = await storeBesideAnotherInstance(t)
  const added = await store.items.add({ id: randomUUID(), name: '0', description: null, status: 'active', contributorId: randomUUID(), createdAt: '', updatedAt: '' })
  let tries = 0
  // Each try, "another instance" writes the item first: its write goes out on its own connection before ours.
  await t.rejects(store.items.update(added!.id, (current) => {
    tries += 1
    void other.hset(`${prefix}items`, current.id, JSON.stringify({ ...current, name: String(tries) }))
    return { ...current, name: 'mine' }
  }), { name: 'StoreUnavailableError', message: `item ${added!.id} changed 16 times while being changed` })
  t.equal(tries, 16)
})

t.test('a store closed while Redis is unreachable closes at once', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const store = await connectRedisStore({ url: redis.url, keyPrefix: 'p:', logger: silent, maxItemsPerContributor: 10 })
  await redis.stop()
  while (store.available()) await new Promise((resolve) => setTimeout(resolve, 5))
  await store.close()
  t.equal(store.available(), false)
})

t.test('a delete that another instance beat re-reads the item and confirms again', { skip }, async (t) => {
  const { prefix, store, other } = await storeBesideAnotherInstance(t)
  const added = await store.items.add({ id: randomUUID(), name: 'before', description: null, status: 'active', contributorId: randomUUID(), createdAt: '', updatedAt: '' })
  const confirmed: string[] = []
  const removed = await store.items.remove(added!.id, (current) => {
    confirmed.push(current.name)
    if (confirmed.length === 1) void other.hset(`${prefix}items`, current.id, JSON.stringify({ ...current, name: 'edited elsewhere' }))
  })
  t.same(confirmed, ['before', 'edited elsewhere'])
  t.equal(removed?.name, 'edited elsewhere', 'what was removed is the item as it last was')
})

t.test('data Redis cannot read as the store wrote it is a bug (500), not an outage (503)', { skip }, async (t) => {
  const { prefix, store, other } = await storeBesideAnotherInstance(t)
  await other.set(`${prefix}users`, 'not a hash')
  await t.rejects(store.users.get(randomUUID()), { name: 'ReplyError', message: /^WRONGTYPE/ })
  await other.hset(`${prefix}rate-limit:limit:key`, 'not', 'a counter')
  const outcome = await new Promise((resolve) => { store.rateCounter('limit').incr('key', 60_000, 1, resolve) })
  t.match(outcome, { name: 'ReplyError', message: /^WRONGTYPE/ }, 'a rate counter\'s too')
})

t.test('each instance keeps what it parsed within its bounds, and hands out only what Redis holds', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const open = async (cache?: { users: number, itemCharacters: number }): Promise<Store> => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: silent, maxItemsPerContributor: 10, ...(cache === undefined ? {} : { cache }) })
    t.teardown(async () => { await store.close() })
    return store
  }
  const writer = await open()
  const small = await open({ users: 1, itemCharacters: 500 })
  const users = [randomUUID(), randomUUID()]
  for (const id of users) await writer.users.add({ id, email: `${id}@b.co`, emailKey: `${id}@b.co`, passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'viewer', createdAt: '' })
  const first = await small.users.get(users[0]!)
  t.equal(await small.users.get(users[0]!), first, 'a user read again comes from the cache')
  await small.users.get(users[1]!)
  t.not(await small.users.get(users[0]!), first, 'one user kept: the other pushed it out, so it is read again')

  const contributorId = randomUUID()
  const item = await writer.items.add({ id: randomUUID(), name: 'n', description: 'd'.repeat(200), status: 'active', contributorId, createdAt: '', updatedAt: '' })
  const parsed = await small.items.get(item!.id)
  t.equal(await small.items.get(item!.id), parsed, 'an unchanged item is not parsed again')
  await writer.items.update(item!.id, (current) => ({ ...current, name: 'changed elsewhere' }))
  t.equal((await small.items.get(item!.id))?.name, 'changed elsewhere', 'a changed one is')
  const changed = await small.items.get(item!.id)
  await writer.items.add({ id: randomUUID(), name: 'm', description: 'e'.repeat(300), status: 'active', contributorId, createdAt: '', updatedAt: '' })
  await small.items.page(0, 10)
  t.not(await small.items.get(item!.id), changed, 'past 500 characters the oldest is let go')
})
