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

  t.test('idempotency keys: an account removed once its claim lapsed and the sweep gave its charge back is not given it back again', async (t) => {
    const store = await fresh(t)
    const before = await store.capacity()
    const ada = await account(store.users)
    await store.idempotencyKeys.claim(claim(ada), 1)
    await sleep(5)
    await store.idempotencyKeys.sweep(Date.now(), 100)
    t.ok(await store.accounts.remove(ada))
    t.same(await store.capacity(), before, 'nothing of it held, nothing given back twice')
  })

  t.test('idempotency keys: a write its room cannot take gives back the charges of records past their time before it is refused, with no sweep', async (t) => {
    const TTL_MS = 1000
    const held = async (store: Store): Promise<number> => (await store.capacity()).heldBytes
    // Two users, the other's create under a key whose item is then removed: its record stays charged until its time.
    const recordedBeside = async (store: Store): Promise<{ writer: string, recordedAt: number, usersBytes: number }> => {
      const [writer, other] = [await account(store.users), await account(store.users)]
      const usersBytes = await held(store)
      const recordedClaim = claim(other)
      await store.idempotencyKeys.claim(recordedClaim, HOUR)
      const recorded = item(other)
      await store.items.add(recorded, undefined, recordedClaim)
      const recordedAt = Date.now()
      await store.items.remove(recorded.id, () => {})
      return { writer, recordedAt, usersBytes }
    }
    // What the users, the record, the other's item and a larger one are charged, as this store reckons them.
    const measuring = await open(t, { maxItemsPerContributor: 10 })
    const { writer: measured, usersBytes } = await recordedBeside(measuring)
    const usersAndRecord = await held(measuring)
    const bytesOf = async (added: Item): Promise<number> => {
      const before = await held(measuring)
      await measuring.items.add(added)
      return await held(measuring) - before
    }
    const itemBytes = await bytesOf(item(measured))
    const perCharacter = (await bytesOf(item(measured, { description: 'd'.repeat(1000) })) - itemBytes) / 1000
    // Larger than the other's item by about half the record: it fits beside the users alone, not beside the record too.
    const larger = { description: 'd'.repeat(Math.round((usersAndRecord - usersBytes) / 2 / perCharacter)) }
    const largerBytes = await bytesOf(item(measured, larger))
    t.ok(largerBytes > itemBytes && largerBytes <= usersAndRecord - usersBytes + itemBytes, 'the larger item is as large as the test needs')
    // Room for the other's create under its key (the users, its record and its item), and nothing more.
    const bounds = { budgetBytes: usersAndRecord + itemBytes, floorBytes: 0, sessionsBytes: 0, ceilingBytes: usersAndRecord + itemBytes }
    const store = await open(t, { maxItemsPerContributor: 10, idempotencyKeys: { ttlMs: TTL_MS }, capacity: bounds })
    const { writer, recordedAt } = await recordedBeside(store)
    t.equal(await held(store), usersAndRecord, 'the record is charged')
    await t.rejects(store.items.add(item(writer, larger)), { name: 'StoreFullError', limit: 'shared' }, 'while the record lives, the larger item does not fit')
    // Waits for time to pass, not for an answer: a slower machine only waits longer.
    await sleep(recordedAt + TTL_MS + 50 - Date.now())
    t.ok(await store.items.add(item(writer, larger)), 'once the record is past its time, the same create goes through')

    // An edit likewise: an item of the writer's, in the room left beside the record, grown to the larger one.
    const editing = await open(t, { maxItemsPerContributor: 10, idempotencyKeys: { ttlMs: TTL_MS }, capacity: bounds })
    const { writer: editor, recordedAt: editedBeside } = await recordedBeside(editing)
    const kept = await editing.items.add(item(editor))
    const grow = async (): Promise<StoredItem | undefined> => await editing.items.update(kept!.id, (current) => ({ ...current, ...larger }))
    await t.rejects(grow(), { name: 'StoreFullError', limit: 'shared' }, 'while the record lives, an edit that grows an item to it does not fit either')
    t.equal(await held(editing), usersAndRecord + itemBytes, 'and changes nothing')
    await sleep(editedBeside + TTL_MS + 50 - Date.now())
    t.match(await grow(), larger, 'once the record is past its time, the same edit goes through')
  })

  t.test('idempotency keys: creates sent together, each making room by pushing out the same oldest records, each count once against their write limit', async (t) => {
    const held = async (store: Store): Promise<number> => (await store.capacity()).heldBytes
    // Records larger than the items: a key of 2 000 characters.
    const recordClaim = (userId: string, index: number): IdempotencyClaim => claim(userId, { key: `${'k'.repeat(2000)}${index}` })
    const measuring = await open(t, { maxItemsPerContributor: 10 })
    const measured = await account(measuring.users)
    const userBytes = await held(measuring)
    const measuredClaim = recordClaim(measured, 0)
    await measuring.idempotencyKeys.claim(measuredClaim, HOUR)
    const recorded = await measuring.items.add(item(measured), undefined, measuredClaim)
    await measuring.items.remove(recorded!.id, () => {})
    const recordBytes = await held(measuring) - userBytes
    const before = await held(measuring)
    await measuring.items.add(item(measured))
    const itemBytes = await held(measuring) - before
    t.ok(recordBytes > 2 * itemBytes, 'a record holds room for more than two items')
    // Room for the user, four records and an item and a half: the first create fits, each after it pushes out a record.
    const store = await open(t, { maxItemsPerContributor: 10, capacity: { budgetBytes: userBytes + 4 * recordBytes + 1.5 * itemBytes, floorBytes: 0, sessionsBytes: 0, ceilingBytes: userBytes + 4 * recordBytes + 1.5 * itemBytes } })
    const ada = await account(store.users)
    for (let index = 0; index < 4; index += 1) {
      const held = recordClaim(ada, index)
      await store.idempotencyKeys.claim(held, HOUR)
      const kept = await store.items.add(item(ada), undefined, held)
      await store.items.remove(kept!.id, () => {})
    }
    t.equal(await held(store), userBytes + 4 * recordBytes, 'four records kept')
    const told: Counted[] = []
    const created = await Promise.all(Array.from({ length: 4 }, async () => await store.items.add(item(ada), undefined, undefined, writeLimit(ada, 4, told))))
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
