// The memory store's sweep of ended sessions: bounded per call, oldest first. What every store guarantees of
// sessions (the sweep taking no live session included) is in ../conformance.ts, run on both stores.
import t from 'tap'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { user } from '../conformance/fixtures.js'

t.test('a sweep forgets at most `limit` ended sessions, oldest first, and none that lives', async (t) => {
  const { users, sessions } = createMemoryStore()
  for (const [id, expiresAt] of [['a', 100], ['b', 200], ['c', 300], ['d', 1000]] as const) {
    await users.add(user({ id: `user-${id}` }))
    await sessions.open({ id, userId: `user-${id}`, expiresAt }, `hash-${id}`, 20)
  }
  t.equal(await sessions.sweep(500, 2), 2)
  t.equal(await sessions.sweep(500, 2), 1)
  t.equal(await sessions.sweep(500, 2), 0)
  t.same(await sessions.get('d', 500), { id: 'd', userId: 'user-d', expiresAt: 1000 })
  t.equal((await sessions.rotateRefreshToken('hash-a', 'next', 500, 0)).status, 'unknown', 'a swept session\'s token is unknown')
})
