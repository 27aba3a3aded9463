// What every Store promises of idempotency keys: a create recorded under its key in the step that makes it, replays,
// bounds per user.
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import type { Item } from '../../../src/domain/index.js'
import { type Counted, type IdempotencyKey, KeyReusedError, QuotaExceededError, type Store, type StoredItem } from '../../../src/store/store.js'
import { account, ADDED, announce, count, type FreshStore, HOUR, item, type OpenStore, writeLimit } from './fixtures.js'

export function idempotencyKeysConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  const keyOf = (userId: string, overrides: Partial<IdempotencyKey> = {}): IdempotencyKey => ({ userId, key: 'k', fingerprint: 'f', ...overrides })
  // Whether the user's key names a create of another request: a create probing it with a fingerprint of its own, which
  // the key refuses before anything else would (past the quota, say).
  const recordedElsewhere = async (store: Store, userId: string, key: string): Promise<boolean> =>
    await store.items.add(item(userId), undefined, keyOf(userId, { key, fingerprint: 'probe' })).then(() => false, (error: unknown) => {
      if (error instanceof KeyReusedError) return true
      if (error instanceof QuotaExceededError) return false
      throw error
    })

  t.test('idempotency keys: a create recorded under its key answers a create with that key and fingerprint with its item, adding nothing; another fingerprint is refused; another user\'s key of the same name is theirs', async (t) => {
    const { users, items } = await fresh(t)
    const ada = await account(users)
    const first = await items.add(item(ada), announce(ADDED), keyOf(ada))
    const again = item(ada)
    t.same(await items.add(again, announce(ADDED), keyOf(ada)), first, 'the first create\'s item, not the one sent again')
    await t.rejects(items.add(item(ada), announce(ADDED), keyOf(ada, { fingerprint: 'other' })), KeyReusedError, 'another request under the key')
    const grace = await account(users)
    const graces = item(grace)
    t.same(await items.add(graces, undefined, keyOf(grace)), { ...graces }, 'another user\'s key of the same name')
    t.equal((await items.page(0, 10)).total, 2, 'one item each')
  })

  t.test('idempotency keys: creates sent at once with one key add one item, and record one event; each is answered with that item', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('all', [ADDED])
    const ada = await account(users)
    const told: Counted[] = []
    const answers = await Promise.all(Array.from({ length: 12 }, async () => await items.add(item(ada), announce(ADDED), keyOf(ada), writeLimit(ada, 100, told))))
    t.equal(new Set(answers.map((answer) => answer!.id)).size, 1, 'one item named by every answer')
    t.equal((await items.page(0, 20)).total, 1)
    t.equal((await outbox.take('all', Date.now() + 1, 20, HOUR)).deliveries.length, 1, 'one event')
    t.equal(told.length, 1, 'one write counted')
  })

  t.test('idempotency keys: a create with a key counts against its write limit; a replay and a refused reuse count nothing; over the limit, nothing is recorded', async (t) => {
    const store = await fresh(t)
    const { users, items } = store
    const ada = await account(users)
    const told: Counted[] = []
    const limit = writeLimit(ada, 2, told)
    const first = await items.add(item(ada), undefined, keyOf(ada), limit)
    t.same(await items.add(item(ada), undefined, keyOf(ada), limit), first)
    await t.rejects(items.add(item(ada), undefined, keyOf(ada, { fingerprint: 'other' }), limit), KeyReusedError)
    t.same(told.map(({ current }) => current), [1], 'only the create made counted')
    await items.add(item(ada), undefined, keyOf(ada, { key: 'second' }), limit)
    await t.rejects(items.add(item(ada), undefined, keyOf(ada, { key: 'third' }), limit), { message: 'over, at 3' })
    t.same(told.map(({ current }) => current), [1, 2, 3])
    const third = item(ada)
    t.same(await items.add(third, undefined, keyOf(ada, { key: 'third' })), { ...third }, 'the key refused recorded nothing')
    t.equal((await count(store, 'writes', ada, HOUR)).current, 4, 'on the rate counter of its name')
  })

  t.test('idempotency keys: a create with a key by a removed account is refused for the removal, and records nothing', async (t) => {
    const store = await fresh(t)
    const ada = await account(store.users)
    t.ok(await store.accounts.remove(ada))
    await t.rejects(store.items.add(item(ada), announce(ADDED), keyOf(ada)), { name: 'UserRemovedError' })
    t.equal((await store.items.page(0, 10)).total, 0, 'nothing was added')
    t.same(await store.usage(), { accounts: 0, heldBytes: 0 })
  })

  t.test('idempotency keys: an account removed once its record expired and the sweep gave its bytes back is not given them back again', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, idempotencyKeys: { ttlMs: 1 } })
    const ada = await account(store.users)
    const added = await store.items.add(item(ada), undefined, keyOf(ada))
    await store.items.remove(added!.id, () => {})
    await sleep(5)
    await store.idempotencyKeys.sweep(Date.now(), 100)
    t.ok(await store.accounts.remove(ada))
    t.same(await store.usage(), { accounts: 0, heldBytes: 0 }, 'nothing of it held, nothing given back twice')
  })

  t.test('idempotency keys: a key used again once its record expired, before the sweep gave its bytes back, records anew and leaves none of the old bytes counted', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, idempotencyKeys: { ttlMs: 1 } })
    const ada = await account(store.users)
    for (let round = 0; round < 2; round += 1) {
      const added = await store.items.add(item(ada), undefined, keyOf(ada))
      await store.items.remove(added!.id, () => {})
      await sleep(5)
    }
    await store.idempotencyKeys.sweep(Date.now(), 100)
    t.same(await store.usage(), { accounts: 1, heldBytes: 0 }, 'each record\'s bytes given back once')
  })

  const heldBy = async (store: Store): Promise<number> => (await store.usage()).heldBytes
  // An item whose text is `bytes` long (its JSON with an empty description is 230).
  const sized = (userId: string, bytes: number): Item => item(userId, { description: 'd'.repeat(bytes - 230) })

  t.test('idempotency keys: a write past its account\'s quota forgets the account\'s own oldest records first, all it needs or none; another account\'s never', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, accounts: { accounts: Infinity, quotaBytes: 4000 } })
    const [ada, grace] = [await account(store.users), await account(store.users)]
    // Each keeps a record of 1 000 bytes of a removed item.
    const recorded = async (userId: string, key: string): Promise<StoredItem> => {
      const added = await store.items.add(sized(userId, 1000), undefined, keyOf(userId, { key }))
      await store.items.remove(added!.id, () => {})
      return added!
    }
    await recorded(ada, 'a')
    await recorded(grace, 'g')
    const records = await heldBy(store)
    await t.rejects(store.items.add(sized(ada, 4100)), { name: 'QuotaExceededError', quotaBytes: 4000 }, 'past the quota with no record at all')
    await t.rejects(store.items.add(sized(await account(store.users), 4100)), { name: 'QuotaExceededError' }, 'and so is an account that keeps nothing yet')
    t.equal(await heldBy(store), records, 'and nothing forgotten for it')
    t.ok(await store.items.add(sized(ada, 3500)), 'a create that fits once the record is forgotten')
    t.notOk(await recordedElsewhere(store, ada, 'a'), 'her record made room')
    t.ok(await recordedElsewhere(store, grace, 'g'), 'another\'s kept')
    // An edit likewise.
    const kept = await store.items.add(sized(grace, 1000))
    await t.rejects(store.items.update(kept!.id, (current) => ({ ...current, description: 'd'.repeat(3900) })), { name: 'QuotaExceededError' }, 'an edit past it')
    t.match(await store.items.update(kept!.id, (current) => ({ ...current, description: 'd'.repeat(3500) })), { description: 'd'.repeat(3500) }, 'one that fits once her record is forgotten')
    t.notOk(await recordedElsewhere(store, grace, 'g'))
  })

  t.test('idempotency keys: creates sent together, each making room by forgetting the same oldest records, each count once against their write limit', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, accounts: { accounts: Infinity, quotaBytes: 4000 } })
    const ada = await account(store.users)
    for (let index = 0; index < 4; index += 1) {
      const kept = await store.items.add(sized(ada, 780), undefined, keyOf(ada, { key: `k${index}` }))
      await store.items.remove(kept!.id, () => {})
    }
    t.equal(await heldBy(store), 4 * 780, 'four records kept')
    // Each item fits once a record is forgotten for it.
    const told: Counted[] = []
    const created = await Promise.all(Array.from({ length: 4 }, async () => await store.items.add(sized(ada, 900), undefined, undefined, writeLimit(ada, 4, told))))
    t.equal(created.filter((added) => added !== undefined).length, 4, 'each created')
    t.same(told.map(({ current }) => current).sort(), [1, 2, 3, 4], 'each counted once')
  })

  t.test('idempotency keys: a user keeps the most recent of their recorded keys, as many as the store allows, each for its time to live', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 1000, idempotencyKeys: { perUser: 2, ttlMs: HOUR } })
    const [ada, grace] = [await account(store.users), await account(store.users)]
    const made = new Map<string, StoredItem | undefined>()
    for (const key of ['a', 'b', 'c']) made.set(key, await store.items.add(item(ada), undefined, keyOf(ada, { key })))
    await store.items.add(item(grace), undefined, keyOf(grace, { key: 'a' }))
    t.same(await store.items.add(item(ada), undefined, keyOf(ada, { key: 'b' })), made.get('b'), 'a replay, which makes no room: the oldest key kept is still there')
    // A probe that finds its key free records it: the one expected to, last.
    t.same([await recordedElsewhere(store, ada, 'c'), await recordedElsewhere(store, ada, 'b'), await recordedElsewhere(store, grace, 'a'), await recordedElsewhere(store, ada, 'a')],
      [true, true, true, false], 'the oldest of three went; the other user kept theirs')
    // Each for its time to live, however long the steps above took: a store whose records live a millisecond.
    const brief = await open(t, { maxItemsPerContributor: 1000, idempotencyKeys: { perUser: 2, ttlMs: 1 } })
    const [ann, ben] = [await account(brief.users), await account(brief.users)]
    await brief.items.add(item(ann), undefined, keyOf(ann, { key: 'c' }))
    await brief.items.add(item(ben), undefined, keyOf(ben, { key: 'a' }))
    await sleep(5)
    t.same([await recordedElsewhere(brief, ann, 'c'), await recordedElsewhere(brief, ben, 'a')], [false, false], 'past their time to live')
  })
}
