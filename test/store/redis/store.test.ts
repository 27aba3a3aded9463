import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { setImmediate as setImmediatePromise, setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { connectRedisStore, scripts } from '../../../src/store/redis/connection.js'
import { type WriteDeadline, writeDeadline } from '../../../src/store/redis/commands.js'
import { Change, type Held, type Refused } from '../../../src/store/redis/commit.js'
import { redisKeys } from '../../../src/store/redis/keys.js'
import type { Store } from '../../../src/store/store.js'
import { itemFields, TEXT } from '../../../src/domain/serialized.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { COMMIT_FORMS, ownRedis, redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../../support/redis.js'
import { redisProxy } from '../../support/redis-proxy.js'
import { storeConformance } from '../conformance/index.js'
import { account, item, user, writeLimit } from '../conformance/fixtures.js'

const skip = await redisSkip()

// Polls until `condition` holds, at most 5 s, then asserts it.
async function eventually (t: Test, condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5000
  while (!await condition() && Date.now() < deadline) await setImmediatePromise()
  t.ok(await condition(), what)
}

// A store under a fresh prefix, and a raw connection of its own standing for another instance, already connected
// so that what it sends goes out at once.
// Another instance's write, made while the store is between its read and its write: synchronous (redis-cli, run to
// its end), so Redis has applied it before the store sends anything more. A write on a connection of this process
// could reach Redis after the store's own, and the store would not have been beaten.
// REDIS_URL as redis-cli's options: its `-u` sends an empty user name as one, which Redis refuses.
function redisCliArguments (url: string): string[] {
  const { hostname, port, username, password, pathname } = new URL(url)
  return [
    '-h', hostname, '-p', port || '6379', '-n', pathname.slice(1) || '0', '--no-auth-warning',
    ...(username === '' ? [] : ['--user', decodeURIComponent(username)]),
    ...(password === '' ? [] : ['-a', decodeURIComponent(password)])
  ]
}

function writeElsewhere (key: string, field: string, value: string): void {
  execFileSync('redis-cli', [...redisCliArguments(REDIS_URL), 'HSET', key, field, value], { stdio: 'ignore' })
}

// True when a session read twice is the same object: the second read came from this instance's cache.
async function readTwiceAlike (store: Store, id: string, now: number): Promise<boolean> {
  const first = await store.sessions.get(id, now)
  return first === await store.sessions.get(id, now)
}

async function storeBesideAnotherInstance (t: Test): Promise<{ prefix: string, store: Store, other: Redis }> {
  const prefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const other = new Redis(REDIS_URL)
  t.teardown(() => { other.disconnect() })
  await other.ping()
  return { prefix, store, other }
}

t.test('the Store contract, on Redis', { skip }, async (t) => {
  storeConformance(t, async (t, options) => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: redisKeyPrefix(t), logger: SILENT_LOGGER, ...options })
    t.teardown(async () => { await store.close() })
    return store
  })
})

t.test('a write refused (over its limit, its key held, its item gone or changed, over the quota) records no reply: a flood of refusals leaves nothing behind', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 1 })
  t.teardown(async () => { await store.close() })
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const outcomes = async (): Promise<number> => (await redis.keys(`${redisKeys(prefix).writeOutcome}*`)).length
  const contributorId = await account(store.users)
  const limit = writeLimit(contributorId, 1)
  const key = { userId: contributorId, key: 'k', fingerprint: 'f' }
  const kept = (await store.items.add(item(contributorId), undefined, key))!
  const written = await outcomes()
  t.equal(written, 2, 'each write that changed something recorded its reply: the account, the add')
  t.same(await store.items.add(item(contributorId), undefined, key), kept, 'a create under a recorded key')
  t.equal(await store.items.add(item(contributorId)), undefined, 'an add over the quota')
  t.equal(await store.items.update(randomUUID(), (current) => current), undefined, 'an edit of no item')
  t.equal(await store.items.remove(randomUUID(), () => {}), undefined, 'a delete of no item')
  await store.items.update(kept.id, (current) => ({ ...current, name: 'counted' }), undefined, limit)
  await t.rejects(store.items.update(kept.id, (current) => ({ ...current, name: 'over' }), undefined, limit), { message: 'over, at 2' }, 'an edit over its limit')
  t.equal(await store.items.add(item(contributorId), undefined, { ...key, key: 'other' }, limit), undefined, 'a create with a key over the quota')
  t.equal(await outcomes(), written + 1, 'only the edit within its limit recorded one')
})

for (const [form, committed] of Object.entries(COMMIT_FORMS)) {
  t.test(`a write script that Redis runs after its deadline changes nothing and fails; before it, it writes, and records its reply (a change ${form})`, { skip }, async (t) => {
    const prefix = redisKeyPrefix(t)
    const redis = new Redis(REDIS_URL, { scripts })
    t.teardown(() => { redis.disconnect() })
    const [seconds] = await redis.time()
    // Deadlines on Redis's clock: a second ago, and a minute ahead.
    const past = writeDeadline(Number(seconds) * 1000 - 1000, 0)
    const future = writeDeadline(Number(seconds) * 1000 + 60_000, 0)
    const keys = redisKeys(prefix)
    const outcome = (write: string): string => `${keys.writeOutcome}${write}`
    const late = { name: 'ReplyError', message: /^DEADLINE the write reached Redis after its deadline/ }
    const item = JSON.stringify({ id: 'i1', contributorId: 'u1', status: 'active' })
    // A session's change as a rule commits it, and one decided on the session as it was then, which a late commit must
    // not make once it is stale.
    const opening = new Change().guard(keys.session + 's1', 'current', null).write('HSET', keys.session + 's1', 'user', 'u1', 'current', 'h1')
    const rotating = new Change().guard(keys.session + 's1', 'current', 'h1').write('HSET', keys.session + 's1', 'current', 'h2')
    const commit = async (change: Change, deadline: WriteDeadline, write: string): Promise<Refused | Held> =>
      (await committed(redis, change, keys.rateLimit, deadline, outcome(write), -1, 0))[0]
    // An item's create, as the item store commits it (its place in a list the sequence the commit takes).
    const adding = new Change().guard(keys.items, 'i1', null).write('INCR', keys.itemSequence)
    adding.write('ZADD', keys.itemOrder, adding.answerOfLast(), 'i1').write('HSET', keys.items, 'i1', item)
    await t.rejects(commit(adding, past, 'add'), late)
    // A registration as the user store commits it: the user, counted among the accounts.
    const registering = new Change().guard(keys.users, 'u1', null).write('HSET', keys.users, 'u1', '{}').count(keys.capacity, 'accounts', 1, 10, 4)
    await t.rejects(commit(registering, past, 'user'), late)
    await t.rejects(commit(opening, past, 'open'), late)
    await t.rejects(redis.countHit(`${keys.rateLimit}a:k`, `${keys.rateLimitKeys}a`, past, 60_000, 100, 10), late)
    t.same(await redis.keys(`${prefix}*`), [], 'nothing was written, no reply recorded either')
    t.equal(await commit(registering, future, 'user'), 1)
    t.equal(await commit(opening, future, 'open'), 1)
    await t.rejects(commit(rotating, past, 'rotate'), late)
    t.equal(await commit(rotating, future, 'rotate'), 1, 'the session was as read: the late change changed nothing')
    t.equal(await commit(rotating, future, 'again'), 0, 'and once changed, it is not as read')
    t.equal(await commit(adding, future, 'add'), 1)
    t.same([await redis.zscore(keys.itemOrder, 'i1'), await redis.get(keys.itemSequence)], ['1', '1'], 'placed by the sequence it took')
    // An edit as the item store commits it, counted against its contributor's quota.
    const edit = new Change().guard(keys.items, 'i1', item).write('HSET', keys.items, 'i1', '{}').count(keys.accountBytes, 'u1', -8, 1000, 'quota')
    await t.rejects(commit(edit, past, 'replace'), late)
    t.equal(await redis.hget(keys.items, 'i1'), item, 'the item is as it was')
    t.same(await redis.mget(outcome('open'), outcome('rotate'), outcome('again'), outcome('add'), outcome('replace')),
      ['[[1,false]]', '[[1,false]]', null, '[[1,false]]', null],
      'each write that ran recorded its reply; none that did not')
    t.ok(await redis.pttl(outcome('add')) > 0, 'for a while')
  })
}

t.test('a catalogue stored by 1.0.0, with no sets by status or contributor, is indexed at the first start, in creation order', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const keys = redisKeys(prefix)
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const [ada, grace] = [randomUUID(), randomUUID()]
  // As 1.0.0 wrote them: the items hash, their creation order and the sequence; more than one scan takes at a time.
  const at = '2026-11-21T00:00:00.000Z'
  const stored = Array.from({ length: 2500 }, (_, index) => ({
    id: randomUUID(),
    name: `item ${index}`,
    // Whatever the contract accepts, which no script parses: a lone surrogate, which lua-cjson refuses.
    description: index % 100 === 0 ? '\ud800' : null,
    status: index % 4 === 0 ? 'archived' : 'active',
    contributorId: index % 2 === 0 ? ada : grace,
    createdAt: at,
    updatedAt: at
  }))
  const write = raw.multi()
  stored.forEach((one, index) => write.hset(keys.items, one.id, JSON.stringify(one)).zadd(keys.itemOrder, index + 1, one.id))
  await write.set(keys.itemSequence, stored.length).exec()
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10_000 })
  t.teardown(async () => { await store.close() })
  const archivedOfAda = stored.filter((one) => one.contributorId === ada && one.status === 'archived')
  const page = await store.items.page(10, 5, { contributorId: ada, status: 'archived' })
  t.same(page.items.map((one) => itemFields(one).id), archivedOfAda.slice(10, 15).map((one) => one.id))
  t.equal(page.total, archivedOfAda.length)
  t.equal((await store.items.page(0, 1, { status: 'active' })).total, stored.length * 3 / 4)
  t.equal((await store.items.page(0, 1, { contributorId: grace })).total, stored.length / 2)
  t.equal(await raw.get(keys.itemsIndexed), '1', 'once: the next start finds the flag')
})

t.test('Redis forgets an ended session by itself, every key of it: there is nothing to sweep', { skip }, async (t) => {
  const { prefix, store, other } = await storeBesideAnotherInstance(t)
  const keys = redisKeys(prefix)
  const session = { id: randomUUID(), userId: await account(store.users), expiresAt: Date.now() + 100 }
  await store.sessions.open(session, 'token-hash', 20)
  const held = [keys.session + session.id, keys.refreshToken + 'token-hash', keys.userSessions + session.userId]
  t.equal(await other.exists(...held), 3, 'held while it lives')
  await eventually(t, async () => await other.exists(...held) === 0, 'gone once it ended')
  t.equal(await store.sessions.sweep(Date.now(), 10), 0)
})

t.test('every key the store writes starts with its prefix', { skip }, async (t) => {
  // A Redis server of its own, so that every key in it is this test's: a database number of the shared server
  // would be shared with the same test of another run on the machine.
  const { url } = await ownRedis(t)
  const prefix = 'items-service-test:prefixed:'
  const store = await connectRedisStore({ url, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const userId = randomUUID()
  const now = Date.now()
  await store.users.add({ id: userId, email: 'a@b.co', emailKey: 'a@b.co', passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'contributor', createdAt: new Date(now).toISOString() })
  await store.sessions.open({ id: randomUUID(), userId, expiresAt: now + 60_000 }, 'token', 20)
  await store.sessions.rotateRefreshToken('token', 'next', now, 5000)
  const added = await store.items.add({ id: randomUUID(), name: 'n', description: null, status: 'active', contributorId: userId, createdAt: '', updatedAt: '' })
  await store.items.update(added!.id, (current) => ({ ...current, name: 'm' }))
  await new Promise((resolve) => { store.rateCounter('limit').incr('key', 60_000, 1, resolve) })
  const redis = new Redis(url)
  t.teardown(() => { redis.disconnect() })
  const keys = await redis.keys('*')
  t.ok(keys.length >= 9, `${keys.length} keys`)
  t.same(keys.filter((key) => !key.startsWith(prefix)), [])
})

t.test('refreshes with one token on two instances at once: one rotates, the other finds the session changed since it read it, reads again, and finds a replay', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const [first, second] = await Promise.all([0, 1].map(async () => await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10 })))
  t.teardown(async () => { await Promise.all([first!.close(), second!.close()]) })
  const now = Date.now()
  const session = { id: randomUUID(), userId: await account(first!.users), expiresAt: now + 60_000 }
  await first!.sessions.open(session, 'token', 20)
  // Both reads reach Redis before either commit: each instance sends its commit only once its read is answered.
  const outcomes = await Promise.all([first!, second!].map(async (store, index) => (await store.sessions.rotateRefreshToken('token', `next-${index}`, now, 0)).status))
  t.same(outcomes.sort(), ['reused', 'rotated'])
  t.equal(await first!.sessions.get(session.id, now), undefined, 'the replay ended the session')
})

t.test('a sign-in forgets the user\'s sessions past their end from its list', { skip }, async (t) => {
  const { prefix, store, other } = await storeBesideAnotherInstance(t)
  const userId = await account(store.users)
  const now = Date.now()
  const [earlier, past, live] = [randomUUID(), randomUUID(), randomUUID()]
  // A live session keeps its user's set of sessions, where the one past its end stays listed until the next sign-in.
  await store.sessions.open({ id: earlier, userId, expiresAt: now + 60_000 }, 'earlier', 20)
  await store.sessions.open({ id: past, userId, expiresAt: now - 1000 }, 'past', 20)
  t.same(await other.zrange(`${prefix}user-sessions:${userId}`, '0', '-1'), [past, earlier])
  await store.sessions.open({ id: live, userId, expiresAt: now + 60_001 }, 'live', 20)
  t.same(await other.zrange(`${prefix}user-sessions:${userId}`, '0', '-1'), [earlier, live], 'the sign-in took it from its user\'s sessions')
})

t.test('an edit that another instance keeps beating gives up after 16 tries with a StoreUnavailableError', { skip }, async (t) => {
  const { prefix, store } = await storeBesideAnotherInstance(t)
  const added = await store.items.add({ id: randomUUID(), name: '0', description: null, status: 'active', contributorId: await account(store.users), createdAt: '', updatedAt: '' })
  let tries = 0
  // Each try, "another instance" writes the item first.
  await t.rejects(store.items.update(added!.id, (current) => {
    tries += 1
    writeElsewhere(`${prefix}items`, current.id, JSON.stringify({ ...current, name: String(tries) }))
    return { ...current, name: 'mine' }
  }), { name: 'StoreUnavailableError', message: `item ${added!.id} changed 16 times while being changed` })
  t.equal(tries, 16)
})

t.test('a store closed while Redis is unreachable closes at once', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const store = await connectRedisStore({ url: redis.url, keyPrefix: 'p:', logger: SILENT_LOGGER, maxItemsPerContributor: 10 })
  await redis.stop()
  while (store.available()) await sleep(5)
  await store.close()
  t.equal(store.available(), false)
})

t.test('sessions are kept only while Redis tracks them for the instance, which it does again by itself after a lost connection', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const store = await connectRedisStore({ url: redis.url, keyPrefix: 'p:', logger: SILENT_LOGGER, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const other = new Redis(redis.url)
  t.teardown(() => { other.disconnect() })
  const id = randomUUID()
  const now = Date.now()
  // A user of its own each time: a flush below takes the first with it.
  const open = async (): Promise<void> => { await store.sessions.open({ id, userId: await account(store.users), expiresAt: now + 60_000 }, randomUUID(), 10) }
  const kept = async (): Promise<boolean> => await readTwiceAlike(store, id, now)
  await open()
  // The invalidation of the session's own writes may still be on its way, and a read it overtakes is not kept.
  await eventually(t, kept, 'a session read is kept')
  await other.call('CLIENT', 'KILL', 'TYPE', 'pubsub')
  await eventually(t, async () => !await kept(), 'once the invalidations\' connection drops, none is kept')
  await eventually(t, kept, 'until that connection is made again and tracked')
  await other.flushall()
  await eventually(t, async () => await store.sessions.get(id, now) === undefined, 'a flush empties the cache')
  // Writes are refused until the store has set the bounds the flush took again.
  await eventually(t, async () => await open().then(() => true, () => false), 'a session opens again')
  await other.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  await eventually(t, async () => !await kept().catch(() => false), 'once the store\'s connection drops, none is kept')
  await eventually(t, async () => await kept().catch(() => false), 'until that connection is made again and tracked')
  await other.del(`p:session:${id}`)
  await eventually(t, async () => await store.sessions.get(id, now) === undefined, 'a change made elsewhere reaches the cache')
})

t.test('a delete that another instance beat re-reads the item and confirms again', { skip }, async (t) => {
  const { prefix, store } = await storeBesideAnotherInstance(t)
  const added = await store.items.add({ id: randomUUID(), name: 'before', description: null, status: 'active', contributorId: await account(store.users), createdAt: '', updatedAt: '' })
  const confirmed: string[] = []
  const removed = await store.items.remove(added!.id, (current) => {
    confirmed.push(current.name)
    if (confirmed.length === 1) writeElsewhere(`${prefix}items`, current.id, JSON.stringify({ ...current, name: 'edited elsewhere' }))
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
  const peeked = await new Promise((resolve) => { store.rateCounter('limit').peek('key', 60_000, resolve) })
  t.match(peeked, { name: 'ReplyError', message: /^WRONGTYPE/ }, 'and a read of one')
})

t.test('each instance keeps the users and sessions it read within its bounds, and hands out only what Redis holds', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const open = async (cache?: { users: number, sessions: number }): Promise<Store> => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10, ...(cache === undefined ? {} : { cache }) })
    t.teardown(async () => { await store.close() })
    return store
  }
  const writer = await open()
  const small = await open({ users: 1, sessions: 1 })
  const users = [randomUUID(), randomUUID()]
  for (const id of users) await writer.users.add({ id, email: `${id}@b.co`, emailKey: `${id}@b.co`, passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'viewer', createdAt: '' })
  const first = await small.users.get(users[0]!)
  t.equal(await small.users.get(users[0]!), first, 'a user read again comes from the cache')
  t.equal(small.users.cached(users[0]!), first, 'at hand, with no round trip')
  await small.users.get(users[1]!)
  t.equal(small.users.cached(users[0]!), undefined, 'one user kept: the other pushed it out')
  t.not(await small.users.get(users[0]!), first, 'so it is read again')

  const now = Date.now()
  const sessions = [randomUUID(), randomUUID()]
  for (const id of sessions) await writer.sessions.open({ id, userId: users[0]!, expiresAt: now + 60_000 }, randomUUID(), 10)
  await eventually(t, async () => await readTwiceAlike(small, sessions[0]!, now), 'a session read again comes from the cache')
  const session = await small.sessions.get(sessions[0]!, now)
  t.equal(small.sessions.cached(sessions[0]!, now), session, 'at hand, with no round trip')
  t.equal(await small.sessions.get(sessions[0]!, now + 60_000), undefined, 'and ends when it ends')
  t.equal(small.sessions.cached(sessions[0]!, now + 60_000), undefined, 'at hand too')
  await small.sessions.get(sessions[1]!, now)
  t.equal(small.sessions.cached(sessions[0]!, now), undefined, 'one session kept: the other pushed it out')
  t.not(await small.sessions.get(sessions[0]!, now), session, 'so it is read again')
  await eventually(t, async () => await readTwiceAlike(small, sessions[0]!, now), 'kept again')
  await writer.sessions.revoke(sessions[0]!)
  // A copy is kept until Redis says the session changed (no time ends it, but its own end): refused means told.
  await eventually(t, async () => await small.sessions.get(sessions[0]!, now) === undefined, 'a session revoked by another instance is refused')
  t.equal(small.sessions.cached(sessions[0]!, now), undefined, 'and no longer at hand')

  const contributorId = await account(writer.users)
  const item = await writer.items.add({ id: randomUUID(), name: 'n', description: 'd'.repeat(200), status: 'active', contributorId, createdAt: '', updatedAt: '' })
  t.equal(String((await small.items.get(item!.id))?.[TEXT]), item![TEXT], 'an item is read as Redis holds it')
  await writer.items.update(item!.id, (current) => ({ ...current, name: 'changed elsewhere' }))
  t.equal(itemFields((await small.items.get(item!.id))!).name, 'changed elsewhere', 'each time: changed by another instance, read changed')
})

t.test('the users each instance keeps copies of for its sandboxes are the service\'s own bound, shared by as many sandboxes as may exist', { skip }, async (t) => {
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: redisKeyPrefix(t), logger: SILENT_LOGGER, maxItemsPerContributor: 10, cache: { users: 4, sessions: 1 } })
  t.teardown(async () => { await store.close() })
  // No receiver is set: nothing to deliver.
  const deliveries = { receiverSet: () => {}, receiverEnded: () => {}, close: async () => {} }
  const sandboxes = store.sandboxes!({ limit: 2, idleMs: 60_000, accounts: 10, quotaBytes: 1024 * 1024 }, { maxItemsPerContributor: 10, idempotencyKeys: {} }, deliveries)
  t.teardown(async () => { await sandboxes.close() })
  const { users } = (await sandboxes.create({}))!.store
  const ids = [randomUUID(), randomUUID(), randomUUID()]
  for (const id of ids) await users.add({ id, email: `${id}@b.co`, emailKey: `${id}@b.co`, passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'viewer', createdAt: '' })
  for (const id of ids) await users.get(id)
  t.same(ids.map((id) => users.cached(id) !== undefined), [false, true, true], 'four a service, two a sandbox of the two that may exist: the oldest pushed out')
})

t.test('an item is handed out as the bytes Redis holds when they are framed as the serializer frames an item, else as the serializer writes it', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10 })
  t.teardown(async () => { await store.close() })
  const at = '2026-11-27T00:00:00.000Z'
  const item = { id: randomUUID(), name: 'n', description: 'a "quoted" "updatedAt":"2026" }', status: 'active', contributorId: randomUUID(), createdAt: at, updatedAt: at }
  const serialized = JSON.stringify(item)
  // As a hand or another program might write it: its fields in another order, with spaces; and one framed as the
  // serializer frames an item but for a quote in its updatedAt.
  const quoted = JSON.stringify({ ...item, updatedAt: `${at}"` })
  const spellings: Array<[spelt: string, sentAs: string]> = [
    [JSON.stringify(Object.fromEntries(Object.entries(item).reverse()), null, 1), serialized],
    [JSON.stringify(Object.fromEntries(Object.entries(item).reverse())), serialized],
    [JSON.stringify(item, null, 1), serialized],
    [quoted, quoted],
    [serialized, serialized]
  ]
  for (const [index, [spelt, sentAs]] of spellings.entries()) {
    await raw.hset(redisKeys(prefix).items, item.id, spelt)
    const read = await store.items.get(item.id)
    t.same(itemFields(read!), JSON.parse(spelt), `spelling ${index}: read as stored`)
    t.equal(read?.updatedAt, JSON.parse(spelt).updatedAt, `spelling ${index}: its updatedAt`)
    t.equal(String(read?.[TEXT]), sentAs, `spelling ${index}: its text the serializer's, in the contract's order, without spaces`)
    t.equal(Buffer.isBuffer(read?.[TEXT]), spelt === serialized, `spelling ${index}: ${spelt === serialized ? 'the bytes Redis answered' : 'written again'}`)
  }
})

t.test('the bounds for accounts hold across instances: the accounts each admits are counted once, and an account\'s bytes wherever it writes', { skip }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  const started = async (): Promise<Store> => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix, logger: SILENT_LOGGER, maxItemsPerContributor: 10, accounts: { accounts: 2, quotaBytes: 3000 } })
    t.teardown(async () => { await store.close() })
    return store
  }
  const [one, other] = [await started(), await started()]
  const ada = await account(one.users)
  await account(other.users)
  await t.rejects(one.users.add(user()), { name: 'StoreFullError', accounts: 2 }, 'the third account, on either instance')
  await t.rejects(other.users.add(user()), { name: 'StoreFullError', accounts: 2 })
  // Items of about 1 400 bytes of text: two fit the quota.
  const sized = (): ReturnType<typeof item> => item(ada, { description: 'd'.repeat(1_170) })
  const kept = await one.items.add(sized())
  await other.items.add(sized())
  await t.rejects(one.items.add(sized()), { name: 'QuotaExceededError', quotaBytes: 3000 }, 'the third item, wherever the first two were written')
  await t.rejects(other.items.update(kept!.id, (current) => ({ ...current, description: 'd'.repeat(1_400) })), { name: 'QuotaExceededError' }, 'an edit past it')
  t.equal(itemFields((await one.items.get(kept!.id))!).description, 'd'.repeat(1_170), 'and the item is as it was')
  t.same(await other.usage(), { accounts: 2, heldBytes: 2 * Buffer.byteLength(kept![TEXT]) })
})

t.test('a catalogue kept with the capacity ledger is served after the upgrade: each account\'s bytes counted again from its items and records, the ledger\'s keys gone, once', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const keys = redisKeys(prefix)
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  // As the ledger kept them: two users admitted with floors, an item each, a record of one of them, a session's and
  // a claim's charge, and the ledger's fields.
  const [ada, grace] = [user(), user()]
  for (const added of [ada, grace]) {
    await redis.hset(keys.users, added.id, JSON.stringify(added))
    await redis.hset(keys.userEmails, added.emailKey, added.id)
  }
  const items = [item(ada.id, { description: 'd'.repeat(500) }), item(grace.id)]
  for (const kept of items) await redis.hset(keys.items, kept.id, JSON.stringify(kept))
  const recordName = `${keys.idempotencyKey}${ada.id}:k`
  await redis.set(recordName, `{"fingerprint":"f","item":${JSON.stringify(items[0])}}`, 'PX', 60_000)
  await redis.zadd(keys.idempotencyKeys + ada.id, Date.now(), recordName)
  const [floors, sessionBytes, charges, expiries] = keys.ledger as [string, string, string, string]
  await redis.hset(charges, recordName, `${ada.id} 3000`, `${keys.session}s1`, `${grace.id} 1200 session`, `${keys.idempotencyKey}${grace.id}:c`, `${grace.id} 600 claim`)
  await redis.zadd(expiries, Date.now() + 60_000, recordName, Date.now() + 60_000, `${keys.session}s1`)
  await redis.hset(floors, ada.id, 102_400, grace.id, 102_400)
  await redis.hset(sessionBytes, grace.id, 1200)
  await redis.hset(keys.accountBytes, ada.id, 9000, grace.id, 2000)
  await redis.hset(keys.capacity, 'budget', 1_000_000, 'floor', 102_400, 'ceiling', 8_000_000, 'held', 13_000, 'floors', 204_800, 'accounts', 2, 'storeId', 'kept')
  const messages: string[] = []
  const logger = { warn: () => {}, info: (message: string) => { messages.push(message) } }
  const start = async (): Promise<Store> => {
    const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, logger, maxItemsPerContributor: 10, accounts: { accounts: 3, quotaBytes: 4000 } })
    t.teardown(async () => { await store.close() })
    return store
  }
  const store = await start()
  const [adaItem, graceItem] = items.map((kept) => Buffer.byteLength(JSON.stringify(kept)))
  t.same((await redis.hmget(keys.accountBytes, ada.id, grace.id)).map(Number), [2 * adaItem!, graceItem!], 'each account\'s bytes: its items\' texts and its records\'')
  t.same(await store.usage(), { accounts: 2, heldBytes: 2 * adaItem! + graceItem! })
  t.same(await redis.exists(...keys.ledger), 0, 'the ledger\'s keys are gone')
  t.same(await redis.hgetall(keys.capacity), { storeId: 'kept', accounts: '2', held: String(2 * adaItem! + graceItem!) }, 'and its fields')
  t.equal(await redis.hget(keys.recordBytes, recordName), `${ada.id} ${adaItem!}`, 'the record counted as records are')
  t.ok(Number(await redis.zscore(keys.recordExpiries, recordName)) > Date.now(), 'and expiring when it did')
  t.same(messages, ['the capacity ledger was replaced by quotas: each account\'s bytes counted again from its items and records, the ledger\'s keys deleted'], 'said once')
  // The quota holds on what was counted: 4 000 bytes, ada's record forgotten for a create that needs its room.
  const retry = item(ada.id)
  t.not((await store.items.add(retry, undefined, { userId: ada.id, key: 'k', fingerprint: 'f' }))?.id, retry.id, 'the record still answers its retry')
  // An item of 100 bytes less than what ada's own item leaves: it fits only once her record is forgotten.
  t.ok(await store.items.add(item(ada.id, { description: 'd'.repeat(4000 - adaItem! - 100 - 230) })), 'the quota holds on what was counted')
  await t.rejects(store.items.add(item(ada.id), undefined, { userId: ada.id, key: 'k', fingerprint: 'f' }), { name: 'QuotaExceededError' }, 'her record made room: a create under its key runs again')
  await start()
  t.equal(messages.length, 1, 'a start after it finds nothing to replace')
})

t.test('a session ended by this instance\'s own write (a sign-in past the bound, a replayed refresh token) is refused by it at once, before Redis\'s invalidation comes', { skip }, async (t) => {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  // A deadline no busy machine reaches: the copies stay on while the invalidations are held.
  const heartbeat = { intervalMs: 250, deadlineMs: 600_000 }
  const store = await connectRedisStore({ url: proxy.url, keyPrefix: redisKeyPrefix(t), logger: SILENT_LOGGER, maxItemsPerContributor: 10, heartbeat })
  t.teardown(async () => { await store.close() })
  const now = Date.now()
  const userId = await account(store.users)
  const open = async (index: number): Promise<string> => {
    const id = randomUUID()
    await store.sessions.open({ id, userId, expiresAt: now + 60_000 + index }, `hash-${id}`, 1)
    return id
  }
  const first = await open(0)
  t.ok(await readTwiceAlike(store, first, now), 'kept at hand')
  // Invalidations held: only the instance's own knowledge can refuse the session now.
  proxy.stall('invalidations')
  const second = await open(1)
  t.equal(await store.sessions.get(first, now), undefined, 'the sign-in past the bound ended the first: refused at once')
  t.ok(await readTwiceAlike(store, second, now), 'the second kept at hand')
  t.match(await store.sessions.rotateRefreshToken(`hash-${second}`, 'next', now, 0), { status: 'rotated' })
  t.same(await store.sessions.rotateRefreshToken(`hash-${second}`, 'again', now, 0), { status: 'reused' }, 'a replay out of the leeway')
  t.equal(await store.sessions.get(second, now), undefined, 'which ended it: refused at once')
})
