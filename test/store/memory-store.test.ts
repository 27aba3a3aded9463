import { randomUUID } from 'node:crypto'
import t from 'tap'
import { createMemoryStore } from '../../src/store/memory-store.js'
import { storeConformance } from './conformance.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries, idempotencyKeys = {} }) => createMemoryStore({
  maxItemsPerContributor,
  idempotencyKeys,
  ...(maxPendingDeliveries === undefined ? {} : { pendingDeliveries: { deliveries: maxPendingDeliveries, characters: 1024 * 1024 } })
}))

t.test('idempotency keys: past as many as the store may hold in all, the user who holds the most loses their oldest', async (t) => {
  const { idempotencyKeys } = createMemoryStore({ idempotencyKeys: { total: 3 } })
  const claim = (userId: string, key = 'k') => ({ userId, key, fingerprint: 'f', token: randomUUID() })
  const [ada, grace, alan] = [randomUUID(), randomUUID(), randomUUID()]
  await idempotencyKeys.claim(claim(ada), 60_000)
  for (const key of ['g1', 'g2']) await idempotencyKeys.claim(claim(grace, key), 60_000)
  await idempotencyKeys.claim(claim(alan), 60_000)
  t.same((await idempotencyKeys.claim(claim(ada), 60_000)).status, 'running', 'the oldest key of all stayed: its user holds the least')
  t.same((await idempotencyKeys.claim(claim(grace, 'g1'), 60_000)).status, 'claimed', 'the heaviest holder\'s oldest went')
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

t.test('idempotency keys: the store keeps as many characters of keys and their items as it may, the oldest out first', async (t) => {
  const { idempotencyKeys, items } = createMemoryStore({ idempotencyKeys: { characters: 24 } })
  const ada = randomUUID()
  const claim = (key: string) => ({ userId: ada, key, fingerprint: 'f', token: randomUUID() })
  const recorded = claim('key1')
  await idempotencyKeys.claim(recorded, 60_000)
  await items.add({ id: randomUUID(), name: 'twelve chars', description: 'four', status: 'active', contributorId: ada, createdAt: '', updatedAt: '' }, undefined, recorded)
  await idempotencyKeys.claim(claim('key2'), 60_000)
  t.same((await idempotencyKeys.claim(claim('key1'), 60_000)).status, 'recorded', '20 characters (key, name, description), then 24: all kept')
  await idempotencyKeys.claim(claim('key3'), 60_000)
  t.same((await idempotencyKeys.claim(claim('key2'), 60_000)).status, 'running', 'the newest stayed')
  t.same((await idempotencyKeys.claim(claim('key1'), 60_000)).status, 'claimed', 'past 24, the oldest went')
})
