import { randomUUID } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { storedItem, TEXT } from '../../../src/serialized.js'
import { itemBytes, keyBytes, MemoryCapacity, sessionBytes } from '../../../src/store/memory/capacity.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { item } from '../conformance/fixtures.js'
import { storeConformance } from '../conformance/index.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries, idempotencyKeys = {}, capacity }) => createMemoryStore({
  maxItemsPerContributor,
  idempotencyKeys,
  ...(capacity === undefined ? {} : { capacity }),
  ...(maxPendingDeliveries === undefined ? {} : { pendingDeliveries: { deliveries: maxPendingDeliveries, characters: 1024 * 1024 } })
}))

t.test('idempotency keys are charged to their user: one out of room loses their own oldest key, one with none of their own is refused, and no one else\'s goes', async (t) => {
  // Room for two claims in all, shared: none of these users was admitted, so none has a floor.
  const { idempotencyKeys, capacity } = createMemoryStore({ capacity: { budgetBytes: 1_000, floorBytes: 0, sessionsBytes: 0, ceilingBytes: 1_000 } })
  const claim = (userId: string, key: string) => ({ userId, key, fingerprint: 'f', token: randomUUID() })
  const [ada, grace] = [randomUUID(), randomUUID()]
  const second = claim(ada, 'a2')
  await idempotencyKeys.claim(claim(ada, 'a1'), 60_000)
  await idempotencyKeys.claim(second, 60_000)
  await t.rejects(idempotencyKeys.claim(claim(grace, 'g1'), 60_000), { name: 'StoreFullError', limit: 'shared' }, 'a user holding nothing is refused')
  t.same((await idempotencyKeys.claim(claim(ada, 'a3'), 60_000)).status, 'claimed', 'a user holding keys makes room from their own oldest')
  t.same((await idempotencyKeys.claim(claim(ada, 'a2'), 60_000)).status, 'running', 'and only the oldest went')
  const held = (await capacity())!.heldBytes
  await idempotencyKeys.release(second)
  t.ok((await capacity())!.heldBytes < held, 'a key let go gives its bytes back')
})

t.test('a create whose item fits but whose idempotency record does not keeps neither, and its claim stays charged until released', async (t) => {
  const owner = randomUUID()
  const made = item(owner)
  const claimed = { userId: owner, key: 'k', fingerprint: 'f', token: randomUUID() }
  const entry = `${owner} k`
  // Room for the claim and the item, one byte short of the record's item fields beside them.
  const budgetBytes = keyBytes(entry) + itemBytes(storedItem(made)) + keyBytes(entry, made) - keyBytes(entry) - 1
  const { items, idempotencyKeys, capacity } = createMemoryStore({ capacity: { budgetBytes, floorBytes: 0, sessionsBytes: 0, ceilingBytes: 2 * budgetBytes } })
  t.equal((await idempotencyKeys.claim(claimed, 60_000)).status, 'claimed')
  await t.rejects(items.add(made, undefined, claimed), { name: 'StoreFullError', limit: 'shared' })
  t.equal(await items.get(made.id), undefined, 'no item')
  t.equal((await capacity())!.heldBytes, keyBytes(entry), 'only the claim is charged')
  await idempotencyKeys.release(claimed)
  t.equal((await capacity())!.heldBytes, 0)
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
  const unadmitted = randomUUID()
  await add(unadmitted, 'd'.repeat(2_000))
  await t.rejects(add(unadmitted, 'd'.repeat(2_000)), { name: 'StoreFullError', limit: 'shared' }, 'an account with no floor has only what is shared')
  for (let index = 0; index < 3; index += 1) await add(light.id, 'd'.repeat(1_000))
  t.pass('the light account writes within its floor, with nothing shared left')
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
  const contributorId = randomUUID()
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
