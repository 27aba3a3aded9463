// What every Store promises of idempotency keys: claims, records, bounds per user.
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import type { Item } from '../../../src/domain/index.js'
import { ClaimLostError, type Counted, type IdempotencyClaim, type Store, type StoredItem } from '../../../src/store/store.js'
import { account, ADDED, announce, count, type FreshStore, HOUR, item, type OpenStore, writeLimit } from './fixtures.js'

export function idempotencyKeysConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  const claim = (userId: string, overrides: Partial<IdempotencyClaim> = {}): IdempotencyClaim =>
    ({ userId, key: 'k', fingerprint: 'f', token: randomUUID(), ...overrides })

  t.test('idempotency keys: a claim holds its key until released or recorded with its item; a record answers a claim with its fingerprint', async (t) => {
    const { users, items, idempotencyKeys } = await fresh(t)
    const ada = await account(users)
    const first = claim(ada)
    t.same(await idempotencyKeys.claim(first, HOUR), { status: 'claimed' })
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'running' }, 'held while it runs')
    t.same(await idempotencyKeys.claim(claim(ada, { fingerprint: 'other' }), HOUR), { status: 'mismatch' }, 'another body, while it runs')
    t.same(await idempotencyKeys.claim(claim(await account(users)), HOUR), { status: 'claimed' }, 'another user\'s key of the same name')
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

  t.test('idempotency keys: a claim made counts against its write limit; what holds the key counts nothing; over the limit, no claim is made and its refusal rejects', async (t) => {
    const store = await fresh(t)
    const { users, items, idempotencyKeys } = store
    const ada = await account(users)
    const told: Counted[] = []
    const limit = writeLimit(ada, 2, told)
    const first = claim(ada)
    t.same(await idempotencyKeys.claim(first, HOUR, limit), { status: 'claimed' })
    t.same(await idempotencyKeys.claim(claim(ada), HOUR, limit), { status: 'running' })
    t.same(await idempotencyKeys.claim(claim(ada, { fingerprint: 'other' }), HOUR, limit), { status: 'mismatch' })
    const added = await items.add(item(ada), undefined, first)
    t.same(await idempotencyKeys.claim(claim(ada), HOUR, limit), { status: 'recorded', item: added })
    t.same(told.map(({ current }) => current), [1], 'only the claim made counted')
    t.same(await idempotencyKeys.claim(claim(ada, { key: 'second' }), HOUR, limit), { status: 'claimed' })
    await t.rejects(idempotencyKeys.claim(claim(ada, { key: 'third' }), HOUR, limit), { message: 'over, at 3' })
    t.same(told.map(({ current }) => current), [1, 2, 3])
    t.same(await idempotencyKeys.claim(claim(ada, { key: 'third' }), HOUR), { status: 'claimed' }, 'the key refused was not claimed')
    t.equal((await count(store, 'writes', ada, HOUR)).current, 4, 'on the rate counter of its name')
  })

  t.test('idempotency keys: an add whose claim lapsed and was taken by another adds nothing; one that lapsed untaken still adds and records', async (t) => {
    const { users, items, idempotencyKeys } = await fresh(t)
    const ada = await account(users)
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

  t.test('idempotency keys: a create whose claim was taken after its account was removed is refused for the removal, on every store', async (t) => {
    const { users, items, idempotencyKeys, accounts } = await fresh(t)
    const ada = await account(users)
    const removedFirst = claim(ada)
    await idempotencyKeys.claim(removedFirst, HOUR)
    t.ok(await accounts.remove(ada))
    // A request authenticated before the removal claims the key its claim no longer holds.
    t.same(await idempotencyKeys.claim(claim(ada), HOUR), { status: 'claimed' })
    await t.rejects(items.add(item(ada), announce(ADDED), removedFirst), { name: 'UserRemovedError' }, 'refused for what happened first: the account is gone')
    t.equal((await items.page(0, 10)).total, 0, 'nothing was added')
  })

  t.test('idempotency keys: an account removed once its record expired and the sweep gave its bytes back is not given them back again', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, idempotencyKeys: { ttlMs: 1 } })
    const ada = await account(store.users)
    const held = claim(ada)
    await store.idempotencyKeys.claim(held, HOUR)
    const added = await store.items.add(item(ada), undefined, held)
    await store.items.remove(added!.id, () => {})
    await sleep(5)
    await store.idempotencyKeys.sweep(Date.now(), 100)
    t.ok(await store.accounts.remove(ada))
    t.same(await store.usage(), { accounts: 0, heldBytes: 0 }, 'nothing of it held, nothing given back twice')
  })

  t.test('idempotency keys: an account removed while a request of its own runs forgets that request\'s claim too', async (t) => {
    const store = await fresh(t)
    const ada = await account(store.users)
    await store.idempotencyKeys.claim(claim(ada, { key: 'running' }), HOUR)
    t.ok(await store.accounts.remove(ada))
    t.same(await store.idempotencyKeys.claim(claim(ada, { key: 'running' }), HOUR), { status: 'claimed' }, 'the key is free')
    t.same(await store.usage(), { accounts: 0, heldBytes: 0 })
  })

  const heldBy = async (store: Store): Promise<number> => (await store.usage()).heldBytes
  // An item whose text is `bytes` long (its JSON with an empty description is 230).
  const sized = (userId: string, bytes: number): Item => item(userId, { description: 'd'.repeat(bytes - 230) })

  t.test('idempotency keys: a write past its account\'s quota forgets the account\'s own oldest records first, all it needs or none; another account\'s never', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, accounts: { accounts: Infinity, quotaBytes: 4000 } })
    const [ada, grace] = [await account(store.users), await account(store.users)]
    // Each keeps a record of 1 000 bytes of a removed item.
    const recorded = async (userId: string, key: string): Promise<StoredItem> => {
      const held = claim(userId, { key })
      await store.idempotencyKeys.claim(held, HOUR)
      const added = await store.items.add(sized(userId, 1000), undefined, held)
      await store.items.remove(added!.id, () => {})
      return added!
    }
    const [adaRecord, graceRecord] = [await recorded(ada, 'a'), await recorded(grace, 'g')]
    const records = await heldBy(store)
    await t.rejects(store.items.add(sized(ada, 4100)), { name: 'QuotaExceededError', quotaBytes: 4000 }, 'past the quota with no record at all')
    await t.rejects(store.items.add(sized(await account(store.users), 4100)), { name: 'QuotaExceededError' }, 'and so is an account that keeps nothing yet')
    t.equal(await heldBy(store), records, 'and nothing forgotten for it')
    t.ok(await store.items.add(sized(ada, 3500)), 'a create that fits once the record is forgotten')
    t.same(await store.idempotencyKeys.claim(claim(ada, { key: 'a' }), HOUR), { status: 'claimed' }, 'her record made room')
    t.same(await store.idempotencyKeys.claim(claim(grace, { key: 'g' }), HOUR), { status: 'recorded', item: graceRecord }, 'another\'s kept')
    t.not(adaRecord.id, graceRecord.id)
    // Her request still running holds its key: a write past her quota, with no record left to forget, forgets not it.
    const running = claim(ada, { key: 'running' })
    await store.idempotencyKeys.claim(running, HOUR)
    await t.rejects(store.items.add(sized(ada, 600)), { name: 'QuotaExceededError' })
    t.same(await store.idempotencyKeys.claim(claim(ada, { key: 'running' }), HOUR), { status: 'running' }, 'a claim is never forgotten for room')
    // An edit likewise.
    const kept = await store.items.add(sized(grace, 1000))
    await t.rejects(store.items.update(kept!.id, (current) => ({ ...current, description: 'd'.repeat(3900) })), { name: 'QuotaExceededError' }, 'an edit past it')
    t.match(await store.items.update(kept!.id, (current) => ({ ...current, description: 'd'.repeat(3500) })), { description: 'd'.repeat(3500) }, 'one that fits once her record is forgotten')
    t.same(await store.idempotencyKeys.claim(claim(grace, { key: 'g' }), HOUR), { status: 'claimed' })
  })

  t.test('idempotency keys: creates sent together, each making room by forgetting the same oldest records, each count once against their write limit', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, accounts: { accounts: Infinity, quotaBytes: 4000 } })
    const ada = await account(store.users)
    for (let index = 0; index < 4; index += 1) {
      const held = claim(ada, { key: `k${index}` })
      await store.idempotencyKeys.claim(held, HOUR)
      const kept = await store.items.add(sized(ada, 780), undefined, held)
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
    const { users, items, idempotencyKeys } = await open(t, { maxItemsPerContributor: 1000, idempotencyKeys: { perUser: 2, ttlMs: 1000 } })
    const [ada, grace] = [await account(users), await account(users)]
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
}
