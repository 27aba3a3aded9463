import { randomUUID } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { TEXT } from '../../../src/serialized.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { StoreFullError } from '../../../src/store/store.js'
import { storeConformance } from '../conformance/index.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries, idempotencyKeys = {} }) => createMemoryStore({
  maxItemsPerContributor,
  idempotencyKeys,
  ...(maxPendingDeliveries === undefined ? {} : { pendingDeliveries: { deliveries: maxPendingDeliveries, characters: 1024 * 1024 } })
}))

t.test('idempotency keys: past as many as the store may hold in all, a new key is refused and no one\'s is forgotten', async (t) => {
  const { idempotencyKeys } = createMemoryStore({ idempotencyKeys: { total: 3 } })
  const claim = (userId: string, key = 'k') => ({ userId, key, fingerprint: 'f', token: randomUUID(), characters: 1 })
  const [ada, grace, alan] = [randomUUID(), randomUUID(), randomUUID()]
  await idempotencyKeys.claim(claim(ada), 60_000)
  for (const key of ['g1', 'g2']) await idempotencyKeys.claim(claim(grace, key), 60_000)
  await t.rejects(idempotencyKeys.claim(claim(alan), 60_000), StoreFullError, 'a fourth key is refused')
  t.same((await idempotencyKeys.claim(claim(ada), 60_000)).status, 'running', 'the first is held still')
  t.same((await idempotencyKeys.claim(claim(grace, 'g1'), 60_000)).status, 'running', 'and so is the heaviest holder\'s oldest')
  await idempotencyKeys.release(claim(grace, 'g2'))
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

t.test('idempotency keys: a claim reserves its characters; a user past their own share loses their own oldest, the store past its bound refuses', async (t) => {
  const { idempotencyKeys } = createMemoryStore({ idempotencyKeys: { characters: 30, perUserCharacters: 20 } })
  const [ada, grace] = [randomUUID(), randomUUID()]
  const claim = (userId: string, key: string) => ({ userId, key, fingerprint: 'f', token: randomUUID(), characters: 10 })
  await idempotencyKeys.claim(claim(ada, 'a1'), 60_000)
  await idempotencyKeys.claim(claim(ada, 'a2'), 60_000)
  await idempotencyKeys.claim(claim(ada, 'a3'), 60_000)
  t.same((await idempotencyKeys.claim(claim(ada, 'a1'), 60_000)).status, 'claimed', 'past their 20, their oldest went, to make room for their newest')
  await idempotencyKeys.claim(claim(grace, 'g1'), 60_000)
  await t.rejects(idempotencyKeys.claim(claim(grace, 'g2'), 60_000), StoreFullError, 'past the store\'s 30, refused')
  t.same((await idempotencyKeys.claim(claim(ada, 'a3'), 60_000)).status, 'running', 'and nobody\'s key was forgotten for it')
})

t.test('an idempotency record keeps its item\'s fields, which its claim counted, not its text: an item edited since is let go', async (t) => {
  // A full collection on demand, for the WeakRef below.
  setFlagsFromString('--expose-gc')
  const collectGarbage = runInNewContext('gc') as () => void
  const store = createMemoryStore()
  const contributorId = randomUUID()
  const claim = { userId: contributorId, key: 'k', fingerprint: 'f', token: randomUUID(), characters: 100 }
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
