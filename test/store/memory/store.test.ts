import { randomUUID } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { storedItem, TEXT } from '../../../src/domain/serialized.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { PENDING_DELIVERIES, PENDING_DELIVERY_BYTES } from '../../../src/domain/bounds.js'
import { account, ADDED, announce, HOUR, item, user } from '../conformance/fixtures.js'
import { storeConformance } from '../conformance/index.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries, maxPendingDeliveryBytes, idempotencyKeys = {}, accounts }) => createMemoryStore({
  maxItemsPerContributor,
  idempotencyKeys,
  ...(accounts === undefined ? {} : { accounts }),
  pendingDeliveries: { deliveries: maxPendingDeliveries ?? PENDING_DELIVERIES, deliveryBytes: maxPendingDeliveryBytes ?? PENDING_DELIVERY_BYTES }
}))

t.test('a create whose item fits its quota but whose idempotency record does not keeps neither, and records nothing under its key', async (t) => {
  const owner = user()
  const made = item(owner.id)
  const key = { userId: owner.id, key: 'k', fingerprint: 'f' }
  // The item's text, and its record's, one byte short.
  const text = Buffer.byteLength(storedItem(made)[TEXT])
  const { users, items, usage } = createMemoryStore({ accounts: { accounts: 1, quotaBytes: 2 * text - 1 } })
  await users.add(owner)
  await t.rejects(items.add(made, undefined, key), { name: 'QuotaExceededError' })
  t.equal(await items.get(made.id), undefined, 'no item')
  t.same(await usage(), { accounts: 1, heldBytes: 0 }, 'nothing counted')
  t.ok(await items.add(made), 'the item alone fits')
  const other = item(owner.id)
  await t.rejects(items.add(other, undefined, key), { name: 'QuotaExceededError' }, 'its key names nothing: a create under it runs again')
})

t.test('every user and live session is at hand from the moment it is added, with no read first', async (t) => {
  const { users, sessions } = createMemoryStore()
  const id = randomUUID()
  const added = await users.add({ id, email: 'a@b.co', emailKey: 'a@b.co', passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'viewer', createdAt: '' })
  t.equal(users.cached(id), added)
  const now = Date.now()
  const session = { id: randomUUID(), userId: id, expiresAt: now + 60_000 }
  await sessions.open(session, 'hash', 10)
  t.same(sessions.cached(session.id, now), session)
})

t.test('an idempotency record keeps its item\'s fields, not its text: an item edited since is let go', async (t) => {
  // A full collection on demand, for the WeakRef below.
  setFlagsFromString('--expose-gc')
  const collectGarbage = runInNewContext('gc') as () => void
  const store = createMemoryStore()
  const contributorId = (await store.users.add(user()))!.id
  const key = { userId: contributorId, key: 'k', fingerprint: 'f' }
  const at = '2026-11-27T00:00:00.000Z'
  // Only its id, its text and a weak reference outlive this call.
  const { id, createdText, asCreated } = await (async () => {
    const added = (await store.items.add({ id: randomUUID(), name: 'n', description: 'd', status: 'active', contributorId, createdAt: at, updatedAt: at }, undefined, key))!
    return { id: added.id, createdText: added[TEXT], asCreated: new WeakRef(added) }
  })()
  await store.items.update(id, (current) => ({ ...current, name: 'edited', updatedAt: '2026-11-27T00:00:01.000Z' }))
  await nextTurn()
  collectGarbage()
  t.equal(asCreated.deref(), undefined, 'the item as created, and its text, are no longer held')
  const replay = await store.items.add({ id: randomUUID(), name: 'n', description: 'd', status: 'active', contributorId, createdAt: at, updatedAt: at }, undefined, key)
  t.equal(replay?.[TEXT], createdText, 'a replay still sends it as it was created')
})

t.test('an outbox bounded in dead letters keeps its newest within them, and one unsubscribed keeps nothing more for its subscriber', async (t) => {
  const { users, items, outbox } = createMemoryStore({ pendingDeliveries: { deliveries: 10, deliveryBytes: 1024 * 1024, deadLetters: 2, deadLetterBytes: 1024 * 1024 } })
  await outbox.subscribe('s', [ADDED])
  const contributorId = await account(users)
  for (let index = 0; index < 3; index += 1) await items.add(item(contributorId), announce(ADDED))
  const now = Date.now() + 1
  const taken = (await outbox.take('s', now, 3, HOUR)).deliveries
  const pushedOut = []
  for (const delivery of taken) pushedOut.push(await outbox.deadLetter('s', delivery, 'answered 500', now))
  t.same(pushedOut, [0, 0, 1], 'the third pushed the oldest out')
  t.same((await outbox.deadLetters('s', { after: 0, limit: 10 })).deadLetters.map(({ eventId }) => eventId), taken.slice(1).map(({ event }) => event.id))

  await items.add(item(contributorId), announce(ADDED))
  outbox.unsubscribe('s')
  await items.add(item(contributorId), announce(ADDED))
  t.same([await outbox.pending('s'), (await outbox.deadLetters('s', { after: 0, limit: 10 })).total], [0, 0], 'its pending deliveries and dead letters are gone')
  t.same((await outbox.take('s', now, 10, HOUR)).deliveries, [], 'and nothing recorded since is kept for it')
})
