import { randomUUID } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { storedItem, TEXT } from '../../../src/domain/serialized.js'
import { itemBytes, keyBytes, MemoryCapacity, sessionBytes, userBytes } from '../../../src/store/memory/capacity.js'
import { admission } from '../../../src/store/capacity.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { PENDING_DELIVERIES, PENDING_DELIVERY_BYTES } from '../../../src/store/rules.js'
import { account, ADDED, announce, HOUR, item, user } from '../conformance/fixtures.js'
import { storeConformance } from '../conformance/index.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries, maxPendingDeliveryBytes, idempotencyKeys = {}, capacity }) => createMemoryStore({
  maxItemsPerContributor,
  idempotencyKeys,
  ...(capacity === undefined ? {} : { capacity }),
  pendingDeliveries: { deliveries: maxPendingDeliveries ?? PENDING_DELIVERIES, deliveryBytes: maxPendingDeliveryBytes ?? PENDING_DELIVERY_BYTES }
}))

t.test('idempotency keys are charged to their user: a create out of room pushes out their own oldest records, all it needs or none, and no one else\'s', async (t) => {
  // Room for the two users, an item and two records in all, shared: no floors are kept.
  const [ownerUser, otherUser] = [user(), user()]
  const owner = ownerUser.id
  const stored = storedItem(item(owner))
  const claimOf = (userId: string, key: string) => ({ userId, key, fingerprint: 'f', token: randomUUID() })
  const record = keyBytes(`${owner} a1`, stored)
  const budgetBytes = userBytes(ownerUser) + userBytes(otherUser) + 2 * (itemBytes(stored) + record) + 10
  const { users, items, idempotencyKeys, capacity } = createMemoryStore({ capacity: { budgetBytes, floorBytes: 0, sessionsBytes: 0, ceilingBytes: budgetBytes } })
  await users.add(ownerUser)
  await users.add(otherUser)
  const create = async (userId: string, key: string): Promise<string> => {
    const claim = claimOf(userId, key)
    t.same(await idempotencyKeys.claim(claim, 60_000), { status: 'claimed' }, 'a claim is never refused for room')
    const made = item(userId)
    try {
      await items.add(made, undefined, claim)
    } catch (error) {
      await idempotencyKeys.release(claim)
      throw error
    }
    return made.id
  }
  await create(owner, 'a1')
  const second = await create(owner, 'a2')
  await t.rejects(create(otherUser.id, 'g1'), { name: 'StoreFullError', limit: 'shared' }, 'a user holding no record is refused')
  // A claim of a recorded key answers what holds it; of a free one, claims it.
  const held = async (key: string): Promise<string> => (await idempotencyKeys.claim(claimOf(owner, key), 60_000)).status
  t.equal(await held('a1'), 'recorded', 'and no one else\'s record went for it')
  await items.remove(second, () => {})
  await create(owner, 'a3')
  t.ok((await capacity())!.heldBytes <= budgetBytes)
  t.equal(await held('a2'), 'recorded', 'only as many as it needs go')
  t.equal(await held('a1'), 'claimed', 'a user holding records makes room from their own oldest')
})

t.test('a create whose item fits but whose idempotency record does not keeps neither, and its claim stays charged until released', async (t) => {
  const ownerUser = user()
  const owner = ownerUser.id
  const made = item(owner)
  const claimed = { userId: owner, key: 'k', fingerprint: 'f', token: randomUUID() }
  const entry = `${owner} k`
  // Room for the user, the claim and the item, one byte short of the record's item fields beside them.
  const budgetBytes = userBytes(ownerUser) + keyBytes(entry) + itemBytes(storedItem(made)) + keyBytes(entry, made) - keyBytes(entry) - 1
  const { users, items, idempotencyKeys, capacity } = createMemoryStore({ capacity: { budgetBytes, floorBytes: 0, sessionsBytes: 0, ceilingBytes: 2 * budgetBytes } })
  await users.add(ownerUser)
  t.equal((await idempotencyKeys.claim(claimed, 60_000)).status, 'claimed')
  await t.rejects(items.add(made, undefined, claimed), { name: 'StoreFullError', limit: 'shared' })
  t.equal(await items.get(made.id), undefined, 'no item')
  t.equal((await capacity())!.heldBytes, userBytes(ownerUser) + keyBytes(entry), 'only the user and the claim are charged')
  await idempotencyKeys.release(claimed)
  t.equal((await capacity())!.heldBytes, userBytes(ownerUser))
})

t.test('the ledger: admitted accounts keep their floors whatever others hold; past a floor, what is shared; past the ceiling, nothing', async (t) => {
  // Two floors kept, 16 000 bytes shared.
  const { users, items, capacity } = createMemoryStore({ capacity: { budgetBytes: 36_000, floorBytes: 10_000, sessionsBytes: 0, ceilingBytes: 25_000, floorsShare: 20_000 / 36_000 } })
  const user = (email: string) => ({ id: randomUUID(), email, emailKey: email, passwordHash: 'h', firstName: 'A', lastName: 'B', role: 'contributor' as const, createdAt: '' })
  const [light, heavy] = [user('light@b.co'), user('heavy@b.co')]
  await users.add(light)
  await users.add(heavy)
  const add = async (owner: string, description: string) => await items.add({ ...item(owner), description })
  // Each about 9 KB as the heap holds it: its description, its text, and the item's own.
  await add(heavy.id, 'd'.repeat(4_000))
  await add(heavy.id, 'd'.repeat(4_000))
  await t.rejects(add(heavy.id, 'd'.repeat(4_000)), { name: 'StoreFullError', limit: 'account' }, 'past the ceiling')
  t.match(await capacity(), { budgetBytes: 36_000, floorsKeptBytes: 20_000, floorsBytes: 20_000, accounts: 2 }, 'two floors reserved')
  t.ok((await capacity())!.sharedUsedBytes > 0, 'the heavy account draws on the shared part')
  await t.rejects(users.add(user('third@b.co')), { name: 'StoreFullError', limit: 'registration' }, 'no floor left for a third account')
  for (let index = 0; index < 3; index += 1) await add(light.id, 'd'.repeat(1_000))
  t.pass('the light account writes within its floor, with nothing shared left')
})

t.test('the ledger: a refund past what its account was charged gives back only that, and counts the rest as a drift', async (t) => {
  const ledger = new MemoryCapacity({ budgetBytes: 10_000, floorBytes: 0, sessionsBytes: 0, ceilingBytes: 10_000 })
  ledger.charge('account', 100)
  ledger.refund('account', 150)
  t.match(ledger.reading(), { heldBytes: 0, driftBytes: 50 })
})

t.test('the ledger: sessions are charged to their part of the floor alone, never refused, never drawing on what is shared', async (t) => {
  const ledger = new MemoryCapacity({ budgetBytes: 40_000, floorBytes: 20_000, sessionsBytes: 8_000, ceilingBytes: 20_000 })
  const account = randomUUID()
  t.equal(ledger.sessionsRoom(account), 8_000, 'an account with no session has its whole part')
  ledger.admit(account, 1_000)
  ledger.chargeSessions(account, sessionBytes(1))
  t.equal(ledger.sessionsRoom(account), 8_000 - sessionBytes(1))
  ledger.charge(account, 11_000)
  t.match(ledger.reading(), { heldBytes: 12_000 + sessionBytes(1), floorsBytes: 20_000, sharedUsedBytes: 0 }, 'the floor beside the sessions\' part holds 12 000')
  ledger.charge(account, 1_000)
  t.match(ledger.reading(), { sharedUsedBytes: 1_000 }, 'past it, the shared part')
  ledger.chargeSessions(account, -sessionBytes(1))
  t.match(ledger.reading(), { heldBytes: 13_000, sharedUsedBytes: 1_000 })
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

t.test('an idempotency record keeps its item\'s fields, which its claim counted, not its text: an item edited since is let go', async (t) => {
  // A full collection on demand, for the WeakRef below.
  setFlagsFromString('--expose-gc')
  const collectGarbage = runInNewContext('gc') as () => void
  const store = createMemoryStore()
  const contributorId = (await store.users.add(user()))!.id
  const claim = { userId: contributorId, key: 'k', fingerprint: 'f', token: randomUUID() }
  t.equal((await store.idempotencyKeys.claim(claim, 60_000)).status, 'claimed')
  const at = '2026-11-27T00:00:00.000Z'
  // Only its id, its text and a weak reference outlive this call.
  const { id, createdText, asCreated } = await (async () => {
    const added = (await store.items.add({ id: randomUUID(), name: 'n', description: 'd', status: 'active', contributorId, createdAt: at, updatedAt: at }, undefined, claim))!
    return { id: added.id, createdText: added[TEXT], asCreated: new WeakRef(added) }
  })()
  await store.items.update(id, (current) => ({ ...current, name: 'edited', updatedAt: '2026-11-27T00:00:01.000Z' }))
  await nextTurn()
  collectGarbage()
  t.equal(asCreated.deref(), undefined, 'the item as created, and its text, are no longer held')
  const replay = await store.idempotencyKeys.claim({ ...claim, token: randomUUID() }, 60_000)
  t.equal(replay.status === 'recorded' ? replay.item[TEXT] : replay.status, createdText, 'a replay still sends it as it was created')
})

t.test('the ledger: the sessions of an account it never admitted (a store used without its users) are charged, and given back', async (t) => {
  const ledger = new MemoryCapacity({ budgetBytes: 40_000, floorBytes: 20_000, sessionsBytes: 8_000, ceilingBytes: 20_000 })
  ledger.chargeSessions('never-admitted', sessionBytes(1))
  t.match(ledger.reading(), { heldBytes: sessionBytes(1), accounts: 0 })
  t.equal(ledger.sessionsRoom('never-admitted'), 8_000 - sessionBytes(1))
  ledger.chargeSessions('never-admitted', -sessionBytes(1))
  t.match(ledger.reading(), { heldBytes: 0 })
  t.equal(ledger.sessionsRoom('never-admitted'), 8_000, 'and forgotten once it holds nothing')
})

t.test('the pace on registrations: its first registration, paced from the start (a store that opens with half its floors taken), finds the bucket full', async (t) => {
  // 4 floors left of 10: paced; a full bucket is one registration (a 24th of 4, at least one).
  const reading = { floorBytes: 1, floorsBytes: 6, floorsKeptBytes: 10, roomMs: 86_400_000, pace: undefined }
  const first = admission(reading, 1_000)
  t.same(first, { pace: { tokens: 0, at: 1_000 }, paced: true })
  t.equal(admission({ ...reading, pace: typeof first === 'object' ? first.pace : undefined }, 1_000), 21_600_000, 'the next waits for the rate: a day over 4 floors')
  t.same(admission({ ...reading, floorsBytes: 4 }, 1_000), { pace: { tokens: 1, at: 1_000 }, paced: false }, 'more than half left: unpaced, the bucket kept full')
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
