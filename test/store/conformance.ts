// What every Store promises, run against each implementation (memory/store.test.ts, redis-store.test.ts).
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { DEAD_LETTER_BYTES, DEAD_LETTERS } from '../../src/store/rules.js'
import type { Item, User } from '../../src/domain.js'
import { type Announcement, ClaimLostError, type Counted, type Delivery, IdTakenError, type IdempotencyClaim, type ItemFilter, type OutboxEvent, type Store } from '../../src/store/store.js'

export interface OpenStoreOptions {
  maxItemsPerContributor: number
  maxPendingDeliveries?: number
  idempotencyKeys?: { ttlMs?: number, perUser?: number }
}

export type OpenStore = (t: Test, options: OpenStoreOptions) => Promise<Store>

const user = (overrides: Partial<User> = {}): User => ({
  id: randomUUID(),
  email: 'Ada@Example.com',
  emailKey: `ada-${randomUUID()}@example.com`,
  passwordHash: '$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA',
  firstName: 'Ada',
  lastName: 'Lovelace',
  role: 'contributor',
  createdAt: '2026-11-23T00:00:00.000Z',
  ...overrides
})

const item = (contributorId: string, overrides: Partial<Item> = {}): Item => ({
  id: randomUUID(),
  name: 'An item',
  description: null,
  status: 'active',
  contributorId,
  createdAt: '2026-11-23T00:00:00.000Z',
  updatedAt: '2026-11-23T00:00:00.000Z',
  ...overrides
})

const count = async (store: Store, name: string, key: string, windowMs: number): Promise<Counted> =>
  await new Promise((resolve, reject) => {
    store.rateCounter(name).incr(key, windowMs, 10, (outcome) => { if (outcome instanceof Error) reject(outcome); else resolve(outcome) })
  })

const peek = async (store: Store, name: string, key: string, windowMs: number): Promise<Counted | undefined> =>
  await new Promise((resolve, reject) => {
    store.rateCounter(name).peek(key, windowMs, (outcome) => { if (outcome instanceof Error) reject(outcome); else resolve(outcome) })
  })

const HOUR = 3_600_000

const announce = (channel: string): Announcement => (announced) => ({ id: randomUUID(), channel, body: JSON.stringify({ channel, item: announced }) })
const ADDED = 'items.item.added'
const EDITED = 'items.item.edited'
const REMOVED = 'items.item.removed'
const bodies = (deliveries: ReadonlyArray<{ event: OutboxEvent }>): unknown[] => deliveries.map(({ event }) => JSON.parse(event.body))

export function storeConformance (t: Test, open: OpenStore): void {
  const fresh = async (t: Test, maxItemsPerContributor = 1000): Promise<Store> => await open(t, { maxItemsPerContributor })

  t.test('users: added once per email key, found by id and by email key, as added', async (t) => {
    const { users } = await fresh(t)
    const ada = user()
    t.same(await users.add(ada), ada)
    t.same(await users.get(ada.id), ada)
    t.same(await users.findByEmailKey(ada.emailKey), ada)
    t.equal(await users.add(user({ emailKey: ada.emailKey })), undefined, 'the email key is taken')
    t.equal(await users.get(randomUUID()), undefined)
    t.equal(await users.findByEmailKey('nobody@example.com'), undefined)
    t.ok(Object.isFrozen(await users.get(ada.id)), 'handed out frozen')
  })

  t.test('ids are never overwritten: a user or an item whose id exists is refused, and what holds it is unchanged', async (t) => {
    const { users, items } = await fresh(t)
    const ada = user()
    await users.add(ada)
    await t.rejects(users.add(user({ id: ada.id })), IdTakenError, 'a new email, an id that is taken')
    t.same(await users.get(ada.id), ada, 'the user is as added')
    t.equal(await users.findByEmailKey(user({ id: ada.id }).emailKey), undefined)
    const first = item(ada.id)
    await items.add(first)
    const grace = user()
    await users.add(grace)
    await t.rejects(items.add(item(grace.id, { id: first.id, name: 'Renamed' })), IdTakenError, 'another owner, an id that is taken')
    t.same(await items.get(first.id), first, 'the item is as added')
    t.same(await items.page(0, 10, { contributorId: grace.id }), { items: [], total: 0 }, 'and counted for nobody else')
    t.same(await items.page(0, 10, { contributorId: ada.id }), { items: [first], total: 1 })
  })

  t.test('users: of concurrent additions with one email key, exactly one succeeds', async (t) => {
    const { users } = await fresh(t)
    const emailKey = `same-${randomUUID()}@example.com`
    const outcomes = await Promise.all(Array.from({ length: 20 }, async () => await users.add(user({ emailKey }))))
    t.equal(outcomes.filter((outcome) => outcome !== undefined).length, 1)
  })

  t.test('sessions: open, get until their end, revoke', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }
    await sessions.open(session, 'hash-1', 20)
    t.same(await sessions.get(session.id, now), session)
    t.equal(await sessions.get(session.id, now + HOUR), undefined, 'ended')
    const unread = { id: randomUUID(), userId: session.userId, expiresAt: now + HOUR }
    await sessions.open(unread, 'hash-unread', 20)
    t.equal(await sessions.get(unread.id, now + HOUR), undefined, 'ended, on its first read')
    t.equal(await sessions.get(randomUUID(), now), undefined)
    await sessions.revoke(session.id)
    t.equal(await sessions.get(session.id, now), undefined, 'revoked')
    t.same(await sessions.rotateRefreshToken('hash-1', 'hash-2', now, 5000), { status: 'unknown' }, 'its token with it')
    await sessions.revoke(session.id)
  })

  t.test('cached hands over at most what get returns: never an unknown user or session, an ended or a revoked one', async (t) => {
    const { users, sessions } = await fresh(t)
    const ada = user()
    await users.add(ada)
    const now = Date.now()
    const session = { id: randomUUID(), userId: ada.id, expiresAt: now + HOUR }
    await sessions.open(session, `hash-${session.id}`, 20)
    // Reading may put them at hand; a store need not keep them.
    t.same(users.cached(ada.id) ?? await users.get(ada.id), ada)
    t.same(sessions.cached(session.id, now) ?? await sessions.get(session.id, now), session)
    t.equal(users.cached(randomUUID()), undefined)
    t.equal(sessions.cached(randomUUID(), now), undefined)
    t.equal(sessions.cached(session.id, now + HOUR), undefined, 'not once ended')
    await sessions.revoke(session.id)
    t.equal(sessions.cached(session.id, now), undefined, 'not once revoked')
  })

  t.test('sessions: a refresh token rotates once; a replaced one is accepted within the leeway, then is a replay', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }
    await sessions.open(session, 'first', 20)
    t.same(await sessions.rotateRefreshToken('first', 'second', now, 5000), { status: 'rotated', session })
    t.same(await sessions.rotateRefreshToken('first', 'retry', now + 4999, 5000), { status: 'rotated', session }, 'within the leeway')
    t.same(await sessions.rotateRefreshToken('second', 'third', now + 5000, 5000), { status: 'rotated', session }, 'the other pair still works')
    t.same(await sessions.rotateRefreshToken('retry', 'late', now + 5000, 5000), { status: 'rotated', session }, 'so does the retry\'s')
    t.same(await sessions.rotateRefreshToken('first', 'replay', now + 5001, 5000), { status: 'reused' }, 'an older token: a replay')
    t.equal(await sessions.get(session.id, now), undefined, 'which ends the session')
    t.same(await sessions.rotateRefreshToken('late', 'after', now, 5000), { status: 'unknown' }, 'and all its tokens')
    t.same(await sessions.rotateRefreshToken('never-issued', 'x', now, 5000), { status: 'unknown' })
  })

  t.test('sessions: an ended session\'s token is unknown, not a replay', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: randomUUID(), expiresAt: now + 1000 }, 'token', 20)
    t.same(await sessions.rotateRefreshToken('token', 'next', now + 1000, 5000), { status: 'unknown' })
  })

  t.test('sessions: with no leeway, of concurrent refreshes with one token exactly one rotates', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }, 'token', 20)
    const outcomes = await Promise.all(Array.from({ length: 10 }, async (_, index) =>
      (await sessions.rotateRefreshToken('token', `next-${index}`, now, 0)).status))
    t.equal(outcomes.filter((status) => status === 'rotated').length, 1)
    t.ok(outcomes.every((status) => status === 'rotated' || status === 'reused' || status === 'unknown'))
  })

  t.test('sessions: one rotation fans out into at most 32 pairs within the leeway', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }, 'first', 20)
    await sessions.rotateRefreshToken('first', 'second', now, 5000)
    const statuses = []
    for (let index = 0; index < 32; index += 1) statuses.push((await sessions.rotateRefreshToken('first', `retry-${index}`, now, 5000)).status)
    t.equal(statuses.filter((status) => status === 'rotated').length, 31, 'the first rotation\'s pair and 31 retries')
    t.equal(statuses.at(-1), 'unknown')
  })

  t.test('sessions: a session remembers its last 16 replaced tokens as replays; older ones are merely unknown', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }
    await sessions.open(session, 'token-0', 20)
    for (let index = 0; index < 18; index += 1) await sessions.rotateRefreshToken(`token-${index}`, `token-${index + 1}`, now, 0)
    t.same(await sessions.rotateRefreshToken('token-0', 'x', now, 0), { status: 'unknown' }, 'forgotten')
    t.same(await sessions.get(session.id, now), session, 'so the session lives on')
    t.same(await sessions.rotateRefreshToken('token-2', 'x', now, 0), { status: 'reused' }, 'remembered')
  })

  t.test('sessions: past the most a user may have, opening one ends the user\'s oldest', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    const userId = randomUUID()
    const opened = []
    for (let index = 0; index < 4; index += 1) {
      const session = { id: randomUUID(), userId, expiresAt: now + HOUR + index }
      await sessions.open(session, `token-${index}`, 3)
      opened.push(session)
    }
    t.equal(await sessions.get(opened[0]!.id, now), undefined, 'the oldest ended')
    t.same(await sessions.rotateRefreshToken('token-0', 'x', now, 0), { status: 'unknown' }, 'with its token')
    for (const session of opened.slice(1)) t.same(await sessions.get(session.id, now), session)
    const other = { id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }
    await sessions.open(other, 'other', 3)
    t.same(await sessions.get(opened[1]!.id, now), opened[1], 'other users\' sessions count apart')
  })

  // What a sweep forgets is each store's own test: the memory store's in sessions.test.ts, Redis's expiry in
  // redis-store.test.ts (it has nothing to sweep).
  t.test('sessions: a sweep takes no live session', async (t) => {
    const { sessions } = await fresh(t)
    const now = Date.now()
    const ended = { id: randomUUID(), userId: randomUUID(), expiresAt: now + 50 }
    const live = { id: randomUUID(), userId: randomUUID(), expiresAt: now + HOUR }
    await sessions.open(ended, 'ended', 20)
    await sessions.open(live, 'live', 20)
    await sessions.sweep(now + 60, 10)
    t.same(await sessions.get(live.id, now + 60), live)
    t.match(await sessions.rotateRefreshToken('live', 'next', now + 60, 0), { status: 'rotated', session: live })
  })

  t.test('items: added, got, paged in creation order with the total', async (t) => {
    const { items } = await fresh(t)
    t.equal(await items.count(), 0)
    const contributorId = randomUUID()
    const added = []
    for (let index = 0; index < 5; index += 1) added.push(await items.add(item(contributorId, { name: `item ${index}`, description: index === 0 ? 'ü€𝄞' : null })))
    t.same(added.map((one) => one?.name), ['item 0', 'item 1', 'item 2', 'item 3', 'item 4'])
    t.same(await items.get(added[0]!.id), added[0])
    t.ok(Object.isFrozen(await items.get(added[0]!.id)), 'handed out frozen')
    t.equal(await items.get(randomUUID()), undefined)
    t.same(await items.page(0, 2), { items: added.slice(0, 2), total: 5 })
    t.same(await items.page(3, 10), { items: added.slice(3), total: 5 })
    t.same(await items.page(10, 10), { items: [], total: 5 })
    t.equal(await items.count(), 5)
    await items.remove(added[1]!.id, () => {})
    t.equal(await items.count(), 4, 'a removed item is no longer counted')
  })

  t.test('items: pages of one status, one contributor or both, in creation order, each with its own total; a status change moves an item to its place', async (t) => {
    const { items } = await fresh(t)
    const [ada, grace] = [randomUUID(), randomUUID()]
    const added: Item[] = []
    // Ada's and Grace's in turn; every third archived.
    for (let index = 0; index < 9; index += 1) {
      added.push((await items.add(item(index % 2 === 0 ? ada : grace, { name: `item ${index}`, status: index % 3 === 0 ? 'archived' : 'active' })))!)
    }
    const ids = (kept: (one: Item) => boolean): string[] => added.filter(kept).map((one) => one.id)
    const pageIds = async (filter: ItemFilter, offset = 0, limit = 100): Promise<{ ids: string[], total: number }> => {
      const { items: page, total } = await items.page(offset, limit, filter)
      return { ids: page.map((one) => one.id), total }
    }
    const expectations: Array<[ItemFilter, (one: Item) => boolean]> = [
      [{}, () => true],
      [{ status: 'active' }, (one) => one.status === 'active'],
      [{ status: 'archived' }, (one) => one.status === 'archived'],
      [{ contributorId: ada }, (one) => one.contributorId === ada],
      [{ contributorId: grace, status: 'archived' }, (one) => one.contributorId === grace && one.status === 'archived']
    ]
    for (const [filter, kept] of expectations) {
      t.same(await pageIds(filter), { ids: ids(kept), total: ids(kept).length }, JSON.stringify(filter))
    }
    t.same(await pageIds({ contributorId: ada, status: 'active' }, 1, 2), { ids: ids((one) => one.contributorId === ada && one.status === 'active').slice(1, 3), total: 3 },
      'a page past the first')
    t.same(await pageIds({ contributorId: randomUUID() }), { ids: [], total: 0 }, 'a contributor with no items')

    // Archive the fifth item (Ada's, active), reactivate the first (Ada's, archived), remove the second (Grace's).
    const [first, second, , , fifth] = added
    await items.update(fifth!.id, (current) => ({ ...current, status: 'archived' }))
    await items.update(first!.id, (current) => ({ ...current, status: 'active' }))
    await items.update(first!.id, (current) => ({ ...current, name: 'renamed, still active' }))
    await items.remove(second!.id, () => {})
    const now = await Promise.all(added.filter((one) => one.id !== second!.id).map(async (one) => (await items.get(one.id))!))
    for (const [filter] of expectations) {
      const kept = now.filter((one) => (filter.status === undefined || one.status === filter.status) && (filter.contributorId === undefined || one.contributorId === filter.contributorId))
      t.same(await pageIds(filter), { ids: kept.map((one) => one.id), total: kept.length }, `after the changes, ${JSON.stringify(filter)}: in creation order still`)
    }
  })

  t.test('items: a contributor owns at most as many as the store allows; removing one frees its place', async (t) => {
    const { items } = await fresh(t, 2)
    const contributorId = randomUUID()
    const first = await items.add(item(contributorId))
    await items.add(item(contributorId))
    t.equal(await items.add(item(contributorId)), undefined, 'over the quota')
    t.ok(await items.add(item(randomUUID())), 'another contributor is not affected')
    await items.remove(first!.id, () => {})
    t.ok(await items.add(item(contributorId)), 'room again')
  })

  t.test('items: concurrent additions get every one stored, each once', async (t) => {
    const { items } = await fresh(t)
    await Promise.all(Array.from({ length: 60 }, async () => await items.add(item(randomUUID()))))
    const { items: page, total } = await items.page(0, 100)
    t.equal(total, 60)
    t.equal(new Set(page.map((one) => one.id)).size, 60)
  })

  t.test('items: update replaces with what the change returns; a throwing change leaves the item as it was', async (t) => {
    const { items } = await fresh(t)
    const original = await items.add(item(randomUUID()))
    const updated = await items.update(original!.id, (current) => ({ ...current, name: 'renamed', status: 'archived' }))
    t.same(updated, { ...original, name: 'renamed', status: 'archived' })
    t.same(await items.get(original!.id), updated)
    await t.rejects(items.update(original!.id, () => { throw new Error('not yours') }), { message: 'not yours' })
    t.same(await items.get(original!.id), updated)
    t.equal(await items.update(randomUUID(), (current) => current), undefined)
  })

  t.test('items: remove hands back the item as it was; a throwing confirm removes nothing', async (t) => {
    const { items } = await fresh(t)
    const kept = await items.add(item(randomUUID()))
    await t.rejects(items.remove(kept!.id, () => { throw new Error('not yours') }), { message: 'not yours' })
    t.same(await items.get(kept!.id), kept)
    t.same(await items.remove(kept!.id, () => {}), kept)
    t.equal(await items.get(kept!.id), undefined)
    t.same(await items.page(0, 10), { items: [], total: 0 })
    t.equal(await items.remove(kept!.id, () => {}), undefined)
  })

  t.test('items: concurrent edits all apply, one after another, and an edit racing a delete is consistent', async (t) => {
    const { items } = await fresh(t)
    const counter = await items.add(item(randomUUID(), { name: '0' }))
    await Promise.all(Array.from({ length: 20 }, async () =>
      await items.update(counter!.id, (current) => ({ ...current, name: String(Number(current.name) + 1) }))))
    t.equal((await items.get(counter!.id))?.name, '20', 'no edit lost')
    const raced = await items.add(item(randomUUID()))
    const [edited, removed] = await Promise.all([
      items.update(raced!.id, (current) => ({ ...current, name: 'edited' })),
      items.remove(raced!.id, () => {})
    ])
    t.ok(removed, 'the delete happened')
    t.equal(await items.get(raced!.id), undefined)
    t.ok(edited === undefined || edited.name === 'edited', 'the edit happened before it, or found nothing')
    t.ok(removed?.name === (edited === undefined ? 'An item' : 'edited'), 'the delete removed what the edit left')
  })

  t.test('rate counters: count per key in a window, apart per name, afresh once the window ends', async (t) => {
    const store = await fresh(t)
    t.same([(await count(store, 'a', 'k', 100)).current, (await count(store, 'a', 'k', 100)).current], [1, 2])
    t.equal((await count(store, 'b', 'k', 100)).current, 1, 'another limit')
    t.equal((await count(store, 'a', 'other', 100)).current, 1, 'another key')
    const { ttl } = await count(store, 'a', 'k', 100)
    t.ok(ttl > 0 && ttl <= 100, `ttl ${ttl}`)
    t.match(await peek(store, 'a', 'k', 100), { current: 3, ttl: Number }, 'a peek counts nothing')
    t.equal(await peek(store, 'a', 'never-counted', 100), undefined)
    await sleep(110)
    t.equal(await peek(store, 'a', 'k', 100), undefined, 'the window has ended')
    t.equal((await count(store, 'a', 'k', 100)).current, 1)
  })

  t.test('now: the store\'s clock in milliseconds since the epoch; on this host, this process\'s within a few', async (t) => {
    const store = await fresh(t)
    const before = Date.now()
    const now = store.now()
    t.ok(Number.isInteger(now) && now >= before - 50 && now <= Date.now() + 50, `${now - before} ms from this process's clock`)
  })

  t.test('rate counters: a refund takes back one hit of the window, never below none; a reset forgets the key', async (t) => {
    const store = await fresh(t)
    const counter = store.rateCounter('a')
    await count(store, 'a', 'k', HOUR)
    await count(store, 'a', 'k', HOUR)
    await counter.refund('k')
    t.equal((await count(store, 'a', 'k', HOUR)).current, 2)
    await counter.refund('k')
    await counter.refund('k')
    await counter.refund('k')
    t.equal((await count(store, 'a', 'k', HOUR)).current, 1, 'refunds beyond the hits counted take back nothing more')
    await counter.refund('never-counted')
    t.equal((await count(store, 'a', 'never-counted', HOUR)).current, 1)
    await counter.reset('k')
    const afresh = await count(store, 'a', 'k', 100)
    t.same([afresh.current, afresh.ttl <= 100], [1, true], 'a new window, of the length the next hit asks')
  })

  t.test('outbox: each stored change records one event, for every subscriber of its channel; a change not stored records none', async (t) => {
    const { items, outbox } = await fresh(t, 1)
    await outbox.subscribe('adds-and-removals', [ADDED, REMOVED])
    await outbox.subscribe('edits', [EDITED])
    const recorded: OutboxEvent[] = []
    outbox.onRecorded((event) => { recorded.push(event) })
    const contributorId = randomUUID()
    const added = await items.add(item(contributorId), announce(ADDED))
    t.equal(await items.add(item(contributorId), announce(ADDED)), undefined, 'over the quota: no event')
    await items.add(item(randomUUID()))
    await t.rejects(items.update(added!.id, () => { throw new Error('not yours') }, announce(EDITED)))
    const edited = await items.update(added!.id, (current) => ({ ...current, name: 'edited' }), announce(EDITED))
    await items.update(randomUUID(), (current) => current, announce(EDITED))
    await t.rejects(items.remove(added!.id, () => { throw new Error('not yours') }, announce(REMOVED)))
    const removed = await items.remove(added!.id, () => {}, announce(REMOVED))
    await outbox.subscribe('adds-and-removals', [ADDED, REMOVED])

    const now = Date.now() + 1
    const first = await outbox.take('adds-and-removals', now, 10, HOUR)
    t.same(bodies(first.deliveries), [{ channel: ADDED, item: added }, { channel: REMOVED, item: removed }])
    t.same(first.deliveries.map((delivery) => delivery.attempt), [1, 1], 'subscribing again (another instance starts) changes nothing')
    t.equal(first.dropped, 0)
    t.same(bodies((await outbox.take('edits', now, 10, HOUR)).deliveries), [{ channel: EDITED, item: edited }])
    t.same(recorded.map((event) => JSON.parse(event.body)), [{ channel: ADDED, item: added }, { channel: EDITED, item: edited }, { channel: REMOVED, item: removed }],
      'this process hears of each stored event, once')
    t.same((await outbox.take('nobody', now, 10, HOUR)).deliveries, [], 'an unknown subscriber has nothing')
  })

  t.test('outbox: a delivery is leased to its taker; settled it ends, given a retry time it waits for it, unsettled it is taken again when its lease ends', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(randomUUID(), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = await outbox.take('s', now, 2, 1000)
    t.same(bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), ['item 0', 'item 1'], 'oldest first, at most the limit')
    t.same((await outbox.take('s', now, 10, 1000)).deliveries.map((delivery) => delivery.attempt), [1], 'the leased ones are not taken again')
    t.equal(await outbox.pending('s'), 3)
    const [delivered, retried] = taken.deliveries
    await outbox.settle('s', delivered!)
    await outbox.settle('s', retried!, now + 5000)
    t.equal(await outbox.pending('s'), 2)
    t.same((await outbox.take('s', now + 999, 10, 1000)).deliveries.map(({ event, attempt }) => [event.id, attempt]), [],
      'the retry waits; the third is still leased')
    const later = await outbox.take('s', now + 5000, 10, 1000)
    t.same(later.deliveries.map(({ event, attempt }) => [event.id, attempt]).sort(),
      [[retried!.event.id, 2], [later.deliveries.find((one) => one.event.id !== retried!.event.id)!.event.id, 2]].sort(),
      'the retry at its time, and the unsettled one after its lease: each as a second attempt')
    for (const delivery of later.deliveries) await outbox.settle('s', delivery)
    t.equal(await outbox.pending('s'), 0)
    await outbox.settle('s', delivered!)
    await outbox.settle('s', delivered!, now)
    t.equal(await outbox.pending('s'), 0, 'settling an ended delivery again changes nothing')
    t.equal(await outbox.pending('nobody'), 0)
  })

  t.test('outbox: a delivery given up is kept as a dead letter, listed oldest first, and delivered again as new, with its event id', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(randomUUID(), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = (await outbox.take('s', now, 3, HOUR)).deliveries
    for (const [index, delivery] of taken.entries()) t.equal(await outbox.deadLetter('s', delivery, `answered 50${index}`, now + index), 0, 'none pushed out')
    t.equal(await outbox.pending('s'), 0, 'a dead letter is no longer pending')
    t.equal(await outbox.deadLetter('s', taken[0]!, 'again', now), 0, 'one that has ended is not kept twice')
    const { deadLetters, total, next } = await outbox.deadLetters('s', { after: 0, limit: 2 })
    t.same([total, next], [3, 2], 'a next page after the second')
    t.same(deadLetters, taken.slice(0, 2).map(({ event, attempt }, index) => ({
      eventId: event.id, channel: event.channel, attempts: attempt, failure: `answered 50${index}`, failedAt: now + index, position: index + 1, eventBytes: Buffer.byteLength(event.body)
    })), 'oldest first, at most the limit, each with its attempts, failure, time, place and event\'s size, without the event')
    t.same(await outbox.deadLetters('s', { after: 2, limit: 2 }), { deadLetters: [{ ...deadLetters[0], eventId: taken[2]!.event.id, failure: 'answered 502', failedAt: now + 2, position: 3, eventBytes: Buffer.byteLength(taken[2]!.event.body) }], total: 3 },
      'the next page, the last')
    t.same(await outbox.deadLetters('s', { after: 0, limit: 0 }), { deadLetters: [], total: 3, next: 0 }, 'a limit of 0 lists none, only the total')
    t.same(await outbox.deadLetters('nobody', { after: 0, limit: 10 }), { deadLetters: [], total: 0 })

    t.equal(await outbox.redeliver('s', [taken[1]!.event.id, randomUUID()], now), 1, 'by event id; an unknown one is skipped')
    t.equal(await outbox.redeliver('s', [], now), 0, 'an empty list gives none back')
    const again = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(again.map(({ event, attempt }) => [event, attempt]), [[taken[1]!.event, 1]], 'taken again as a first attempt, the same event')
    t.equal(await outbox.redeliver('s', undefined, now), 2, 'all the others')
    t.same((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 0)
    t.equal((await outbox.take('s', now, 10, HOUR)).deliveries.length, 2)
    t.equal(await outbox.redeliver('nobody', undefined, now), 0)
  })

  t.test('outbox: an event\'s traceparent stays with each of its deliveries: retried, dead-lettered and delivered again', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const traceparent = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`
    const traced: Announcement = (announced) => ({ ...announce(ADDED)(announced), traceparent })
    await items.add(item(randomUUID(), { name: 'traced' }), traced)
    await items.add(item(randomUUID(), { name: 'untraced' }), announce(ADDED))
    const now = Date.now() + 1
    // By name: deliveries due at one time may come in any order.
    const traceparents = (deliveries: ReadonlyArray<{ event: OutboxEvent }>): unknown[] => deliveries.map(({ event }) => [(JSON.parse(event.body) as { item: Item }).item.name, event.traceparent])
      .sort(([a], [b]) => String(a).localeCompare(String(b)))
    const taken = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(taken), [['traced', traceparent], ['untraced', undefined]])
    for (const delivery of taken) await outbox.settle('s', delivery, now)
    const retried = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(retried), [['traced', traceparent], ['untraced', undefined]], 'on a retry')
    for (const delivery of retried) await outbox.deadLetter('s', delivery, 'answered 500', now)
    await outbox.redeliver('s', undefined, now)
    const redelivered = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(redelivered), [['traced', traceparent], ['untraced', undefined]], 'delivered again')
  })

  t.test(`outbox: a subscriber keeps at most ${DEAD_LETTERS} dead letters, the oldest out first`, async (t) => {
    const { items, outbox } = await fresh(t, DEAD_LETTERS + 1)
    await outbox.subscribe('s', [ADDED])
    const contributorId = randomUUID()
    for (let index = 0; index <= DEAD_LETTERS; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    const taken = []
    // A take may hand out fewer than are due (Redis fans out events in batches).
    while (taken.length <= DEAD_LETTERS) taken.push(...(await outbox.take('s', now, DEAD_LETTERS + 1, HOUR)).deliveries)
    const pushedOut = []
    for (const delivery of taken) pushedOut.push(await outbox.deadLetter('s', delivery, 'answered 500', now))
    t.same(pushedOut.filter((count) => count > 0), [1], 'the last one pushed one out')
    const { deadLetters, total } = await outbox.deadLetters('s', { after: 0, limit: 1 })
    t.equal(total, DEAD_LETTERS)
    t.same(deadLetters.map((deadLetter) => deadLetter.eventId), [taken[1]!.event.id], 'the oldest went')
  })

  t.test('outbox: a page of dead letters carries their events when asked, within its bytes (its first whatever its size)', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    // Events of about 10, 30, 10 and 10 KiB, the second's in two-byte characters.
    const sized = (text: string): Announcement => (announced) => ({ id: randomUUID(), channel: ADDED, body: JSON.stringify({ item: announced, text }) })
    for (const text of ['a'.repeat(10_240), 'é'.repeat(15_360), 'b'.repeat(10_240), 'c'.repeat(10_240)]) await items.add(item(randomUUID()), sized(text))
    const now = Date.now() + 1
    const taken: Delivery[] = []
    while (taken.length < 4) taken.push(...(await outbox.take('s', now, 4, HOUR)).deliveries)
    for (const delivery of taken) await outbox.deadLetter('s', delivery, 'answered 500', now)
    const bytes = taken.map(({ event }) => Buffer.byteLength(event.body))
    const page = async (after: number, bodyBytes: number): Promise<unknown[]> =>
      (await outbox.deadLetters('s', { after, limit: 10, bodyBytes })).deadLetters.map(({ eventId, eventBytes, body }) => [eventId, eventBytes, body])
    const listed = (index: number): unknown[] => [taken[index]!.event.id, bytes[index], taken[index]!.event.body]
    t.same(await page(0, bytes[0]! + bytes[1]!), [listed(0), listed(1)], 'as many as the bytes allow, each with its event')
    t.same(await page(0, bytes[0]! + bytes[1]! - 1), [listed(0)], 'not one whose event would pass them')
    t.same((await outbox.deadLetters('s', { after: 0, limit: 10, bodyBytes: bytes[0]! + bytes[1]! - 1 })).next, 1, 'and says where the rest begin')
    t.same(await page(1, 1), [listed(1)], 'the first of a page is listed whatever its size')
    t.same(await page(2, 1_000_000), [listed(2), listed(3)])
    t.same(await outbox.deadLetters('s', { after: 4, limit: 10 }), { deadLetters: [], total: 4 }, 'nothing after the last')
  })

  t.test(`outbox: a subscriber's dead letters keep at most ${DEAD_LETTER_BYTES} bytes of events, the oldest out first`, async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const large: Announcement = (announced) => ({ id: randomUUID(), channel: ADDED, body: JSON.stringify({ item: announced, text: 'x'.repeat(DEAD_LETTER_BYTES / 4) }) })
    const taken: Delivery[] = []
    const pushedOut = []
    // One at a time: pending, they would pass the memory outbox's own bound.
    for (let index = 0; index < 5; index += 1) {
      await items.add(item(randomUUID()), large)
      const [delivery] = (await outbox.take('s', Date.now() + 1, 1, HOUR)).deliveries
      taken.push(delivery!)
      pushedOut.push(await outbox.deadLetter('s', delivery!, 'answered 500', Date.now()))
    }
    t.same(pushedOut, [0, 0, 0, 1, 1], 'each past three a quarter of the bound and more pushes the oldest out')
    const { deadLetters, total } = await outbox.deadLetters('s', { after: 0, limit: 10 })
    t.same([total, deadLetters.map(({ eventId }) => eventId)], [3, taken.slice(2).map(({ event }) => event.id)])
    const now = Date.now() + 1
    t.equal(await outbox.redeliver('s', [taken[2]!.event.id], now), 1, 'redelivered, one leaves the bound')
    const [again] = (await outbox.take('s', now, 1, HOUR)).deliveries
    t.equal(await outbox.deadLetter('s', again!, 'answered 500', now), 0, 'and comes back within it')
    t.equal((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 3)
  })

  t.test('outbox: every dead letter is redelivered however many there are, in the order they were kept', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const contributorId = randomUUID()
    for (let index = 0; index < 250; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    const taken: Delivery[] = []
    while (taken.length < 250) taken.push(...(await outbox.take('s', now, 250, HOUR)).deliveries)
    for (const delivery of taken) await outbox.deadLetter('s', delivery, 'answered 500', now)
    const ids = taken.map(({ event }) => event.id)
    t.equal(await outbox.redeliver('s', [...ids.slice(0, 120), ...ids.slice(0, 120)], now), 120, 'given ids, in batches; one given twice goes once')
    t.equal(await outbox.redeliver('s', undefined, now), 130, 'all the rest')
    const again = []
    for (let batch = await outbox.take('s', now, 250, HOUR); batch.deliveries.length > 0; batch = await outbox.take('s', now, 250, HOUR)) again.push(...batch.deliveries)
    t.same(again.map(({ event }) => event.id).sort(), [...ids].sort(), 'each once')
  })

  t.test('outbox: dead letters are delivered again only while the subscriber\'s pending deliveries have room', async (t) => {
    const { items, outbox } = await open(t, { maxItemsPerContributor: 10, maxPendingDeliveries: 2 })
    await outbox.subscribe('s', [ADDED])
    const contributorId = randomUUID()
    for (let index = 0; index < 2; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    for (const delivery of (await outbox.take('s', now, 2, HOUR)).deliveries) await outbox.deadLetter('s', delivery, 'answered 500', now)
    for (let index = 0; index < 2; index += 1) await items.add(item(contributorId), announce(ADDED))
    await outbox.take('s', now, 2, HOUR)
    t.equal(await outbox.pending('s'), 2, 'at the bound')
    t.equal(await outbox.redeliver('s', undefined, now), 0, 'no room: they stay')
    t.equal((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 2)
  })

  t.test('outbox: retries come back soonest first, each at its time', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 5; index += 1) await items.add(item(randomUUID(), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = (await outbox.take('s', now, 5, HOUR)).deliveries
    const waits = [10, 30, 20, 40, 5]
    for (const [index, delivery] of taken.entries()) await outbox.settle('s', delivery, now + (waits[index] ?? 0))
    const names = async (at: number): Promise<string[]> =>
      bodies((await outbox.take('s', at, 10, HOUR)).deliveries).map((body) => (body as { item: Item }).item.name)
    t.same(await names(now + 25), ['item 4', 'item 0', 'item 2'], 'those due by then, soonest first')
    t.same(await names(now + 50), ['item 1', 'item 3'])
  })

  t.test('outbox: a take hands out at most its limit, whatever is due', async (t) => {
    const { items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(randomUUID()), announce(ADDED))
    const now = Date.now() + 1
    t.equal((await outbox.take('s', now, 3, 10)).deliveries.length, 3)
    t.same((await outbox.take('s', now + 10, 1, 10)).deliveries.map((delivery) => delivery.attempt), [2], 'one of the three whose lease ended')
    t.equal((await outbox.take('s', now + 10, 5, 10)).deliveries.length, 2, 'then the other two')
  })

  t.test('outbox: a subscriber keeps a bounded number of deliveries; past it, new events are dropped and counted once', async (t) => {
    const { items, outbox } = await open(t, { maxItemsPerContributor: 1000, maxPendingDeliveries: 3 })
    await outbox.subscribe('slow', [ADDED])
    for (let index = 0; index < 5; index += 1) await items.add(item(randomUUID(), { name: `item ${index}` }), announce(ADDED))
    const taken = await outbox.take('slow', Date.now() + 1, 10, HOUR)
    t.same(bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), ['item 0', 'item 1', 'item 2'], 'those already waiting keep their place')
    t.equal(taken.dropped, 2)
    t.equal((await outbox.take('slow', Date.now() + 1, 10, HOUR)).dropped, 0, 'counted once')
  })

  const claim = (userId: string, overrides: Partial<IdempotencyClaim> = {}): IdempotencyClaim =>
    ({ userId, key: 'k', fingerprint: 'f', token: randomUUID(), characters: 1, ...overrides })

  t.test('idempotency keys: a claim holds its key until released or recorded with its item; a record answers a claim with its fingerprint', async (t) => {
    const { items, idempotencyKeys } = await fresh(t)
    const ada = randomUUID()
    const first = claim(ada)
    t.same(await idempotencyKeys.claim(first, HOUR), { status: 'claimed' })
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'running' }, 'held while it runs')
    t.same(await idempotencyKeys.claim(claim(ada, { fingerprint: 'other' }), HOUR), { status: 'mismatch' }, 'another body, while it runs')
    t.same(await idempotencyKeys.claim(claim(randomUUID()), HOUR), { status: 'claimed' }, 'another user\'s key of the same name')
    await idempotencyKeys.release(claim(ada))
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'running' }, 'only the claim that holds it frees it')
    await idempotencyKeys.release(first)
    const second = claim(ada)
    t.same(await idempotencyKeys.claim(second, HOUR), { status: 'claimed' }, 'freed')
    const added = await items.add(item(ada), undefined, second)
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'recorded', item: added })
    t.same(await idempotencyKeys.claim(claim(ada, { fingerprint: 'other' }), HOUR), { status: 'mismatch' })
    await idempotencyKeys.release(second)
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'recorded', item: added }, 'a release after the record frees nothing')
    t.equal((await items.page(0, 10)).total, 1)
  })

  t.test('idempotency keys: an add whose claim lapsed and was taken by another adds nothing; one that lapsed untaken still adds and records', async (t) => {
    const { items, idempotencyKeys } = await fresh(t)
    const ada = randomUUID()
    const lapsed = claim(ada)
    await idempotencyKeys.claim(lapsed, 1)
    await sleep(5)
    const taker = claim(ada)
    t.same(await idempotencyKeys.claim(taker, HOUR), { status: 'claimed' }, 'a lapsed claim holds nothing')
    await t.rejects(items.add(item(ada), announce(ADDED), lapsed), ClaimLostError)
    t.equal((await items.page(0, 10)).total, 0, 'nothing was added')
    const untaken = claim(ada, { key: 'other' })
    await idempotencyKeys.claim(untaken, 1)
    await sleep(5)
    const added = await items.add(item(ada), undefined, untaken)
    t.same(await idempotencyKeys.claim(claim(ada, { key: 'other' }), HOUR), { status: 'recorded', item: added })
  })

  t.test('idempotency keys: a user keeps the most recent of their recorded keys, as many as the store allows, each for its time to live', async (t) => {
    const { items, idempotencyKeys } = await open(t, { maxItemsPerContributor: 1000, idempotencyKeys: { perUser: 2, ttlMs: 1000 } })
    const [ada, grace] = [randomUUID(), randomUUID()]
    const recorded = async (userId: string, key: string): Promise<void> => {
      const held = claim(userId, { key })
      await idempotencyKeys.claim(held, HOUR)
      await items.add(item(userId), undefined, held)
    }
    for (const key of ['a', 'b', 'c']) await recorded(ada, key)
    await recorded(grace, 'a')
    const status = async (userId: string, key: string): Promise<string> => (await idempotencyKeys.claim(claim(userId, { key, fingerprint: 'probe' }), 1)).status
    // A claim that finds its key free takes it: the one expected to, last.
    t.same([await status(ada, 'c'), await status(ada, 'b'), await status(grace, 'a'), await status(ada, 'a')], ['mismatch', 'mismatch', 'mismatch', 'claimed'],
      'the oldest of three went; the other user kept theirs')
    await sleep(1050)
    t.same([await status(ada, 'c'), await status(grace, 'a')], ['claimed', 'claimed'], 'past their time to live')
  })

  t.test('available until closed', async (t) => {
    const store = await fresh(t)
    t.equal(store.available(), true)
    await store.close()
    t.equal(store.available(), false)
  })
}
