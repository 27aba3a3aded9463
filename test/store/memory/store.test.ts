import { randomUUID } from 'node:crypto'
import t from 'tap'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { StoreFullError } from '../../../src/store/store.js'
import { storeConformance } from '../conformance.js'

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
