// What every Store promises of sessions: open, rotate, revoke, bounded per user, swept.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import { account, type FreshStore, HOUR, type OpenStore, user } from './fixtures.js'

export function sessionsConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('sessions: open, get until their end, revoke', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }
    await sessions.open(session, 'hash-1', 20)
    t.same(await sessions.get(session.id, now), session)
    t.equal(await sessions.get(session.id, now + HOUR), undefined, 'ended')
    const unread = { id: randomUUID(), userId: session.userId, expiresAt: now + HOUR }
    await sessions.open(unread, 'hash-unread', 20)
    t.equal(await sessions.get(unread.id, now + HOUR), undefined, 'ended, on its first read')
    t.equal(await sessions.get(randomUUID(), now), undefined)
    await sessions.revoke(session.id)
    t.equal(await sessions.get(session.id, now), undefined, 'revoked')
    t.same(await sessions.rotateRefreshToken('hash-1', 'hash-2', now, 5000), { status: 'unknown' }, 'its token with it')
    await sessions.revoke(session.id)
  })

  t.test('sessions: a sign-in past maxPerUser ends the user\'s oldest, and a session that grows to the most it remembers ends no other', async (t) => {
    const { users, sessions } = await fresh(t)
    const ada = user()
    await users.add(ada)
    const now = Date.now()
    const opened: string[] = []
    const live = async (): Promise<string[]> => (await Promise.all(opened.map(async (id) => await sessions.get(id, now)))).flatMap((session) => session?.id ?? [])
    for (let index = 0; index < 6; index += 1) {
      const id = randomUUID()
      // Every session of a deployment lives as long: the later opened, the later it ends.
      await sessions.open({ id, userId: ada.id, expiresAt: now + HOUR + index }, `hash-${id}`, 4)
      opened.push(id)
    }
    t.same(await live(), opened.slice(2), 'the oldest two ended')
    // The oldest live session refreshes, fanning out as many pairs as a rotation may from each of its last tokens.
    const growing = opened[2]!
    let presented = `hash-${growing}`
    for (let rotation = 0; rotation < 18; rotation += 1) {
      const next = `${growing}-${rotation}`
      t.match(await sessions.rotateRefreshToken(presented, next, now, HOUR), { status: 'rotated' })
      const pairs = rotation >= 16 ? 32 : 1
      for (let pair = 1; pair < pairs; pair += 1) {
        t.match(await sessions.rotateRefreshToken(presented, `${next}-${pair}`, now, HOUR), { status: 'rotated' })
      }
      presented = next
    }
    t.same(await live(), opened.slice(2), 'every session goes on')
  })

  t.test('cached hands over at most what get returns: never an unknown user or session, an ended or a revoked one', async (t) => {
    const { users, sessions } = await fresh(t)
    const ada = user()
    await users.add(ada)
    const now = Date.now()
    const session = { id: randomUUID(), userId: ada.id, expiresAt: now + HOUR }
    await sessions.open(session, `hash-${session.id}`, 20)
    // Reading may put them at hand; a store need not keep them.
    t.same(users.cached(ada.id) ?? await users.get(ada.id), ada)
    t.same(sessions.cached(session.id, now) ?? await sessions.get(session.id, now), session)
    t.equal(users.cached(randomUUID()), undefined)
    t.equal(sessions.cached(randomUUID(), now), undefined)
    t.equal(sessions.cached(session.id, now + HOUR), undefined, 'not once ended')
    await sessions.revoke(session.id)
    t.equal(sessions.cached(session.id, now), undefined, 'not once revoked')
  })

  t.test('sessions: a refresh token rotates once; a replaced one is accepted within the leeway, then is a replay', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }
    await sessions.open(session, 'first', 20)
    t.same(await sessions.rotateRefreshToken('first', 'second', now, 5000), { status: 'rotated', session })
    t.same(await sessions.rotateRefreshToken('first', 'retry', now + 4999, 5000), { status: 'rotated', session }, 'within the leeway')
    t.same(await sessions.rotateRefreshToken('second', 'third', now + 5000, 5000), { status: 'rotated', session }, 'the other pair still works')
    t.same(await sessions.rotateRefreshToken('retry', 'late', now + 5000, 5000), { status: 'rotated', session }, 'so does the retry\'s')
    t.same(await sessions.rotateRefreshToken('first', 'replay', now + 5001, 5000), { status: 'reused' }, 'an older token: a replay')
    t.equal(await sessions.get(session.id, now), undefined, 'which ends the session')
    t.same(await sessions.rotateRefreshToken('late', 'after', now, 5000), { status: 'unknown' }, 'and all its tokens')
    t.same(await sessions.rotateRefreshToken('never-issued', 'x', now, 5000), { status: 'unknown' })
  })

  t.test('sessions: an ended session\'s token is unknown, not a replay', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: await account(users), expiresAt: now + 1000 }, 'token', 20)
    t.same(await sessions.rotateRefreshToken('token', 'next', now + 1000, 5000), { status: 'unknown' })
  })

  t.test('sessions: with no leeway, of concurrent refreshes with one token exactly one rotates', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }, 'token', 20)
    const outcomes = await Promise.all(Array.from({ length: 10 }, async (_, index) =>
      (await sessions.rotateRefreshToken('token', `next-${index}`, now, 0)).status))
    t.equal(outcomes.filter((status) => status === 'rotated').length, 1)
    t.ok(outcomes.every((status) => status === 'rotated' || status === 'reused' || status === 'unknown'))
  })

  t.test('sessions: one rotation fans out into at most 32 pairs within the leeway', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    await sessions.open({ id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }, 'first', 20)
    await sessions.rotateRefreshToken('first', 'second', now, 5000)
    const statuses = []
    for (let index = 0; index < 32; index += 1) statuses.push((await sessions.rotateRefreshToken('first', `retry-${index}`, now, 5000)).status)
    t.equal(statuses.filter((status) => status === 'rotated').length, 31, 'the first rotation\'s pair and 31 retries')
    t.equal(statuses.at(-1), 'unknown')
  })

  t.test('sessions: a session remembers its last 16 replaced tokens as replays; older ones are merely unknown', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const session = { id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }
    await sessions.open(session, 'token-0', 20)
    for (let index = 0; index < 18; index += 1) await sessions.rotateRefreshToken(`token-${index}`, `token-${index + 1}`, now, 0)
    t.same(await sessions.rotateRefreshToken('token-0', 'x', now, 0), { status: 'unknown' }, 'forgotten')
    t.same(await sessions.get(session.id, now), session, 'so the session lives on')
    t.same(await sessions.rotateRefreshToken('token-2', 'x', now, 0), { status: 'reused' }, 'remembered')
  })

  t.test('sessions: past the most a user may have, opening one ends the user\'s oldest', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const userId = await account(users)
    const opened = []
    for (let index = 0; index < 4; index += 1) {
      const session = { id: randomUUID(), userId, expiresAt: now + HOUR + index }
      await sessions.open(session, `token-${index}`, 3)
      opened.push(session)
    }
    t.equal(await sessions.get(opened[0]!.id, now), undefined, 'the oldest ended')
    t.same(await sessions.rotateRefreshToken('token-0', 'x', now, 0), { status: 'unknown' }, 'with its token')
    for (const session of opened.slice(1)) t.same(await sessions.get(session.id, now), session)
    const other = { id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }
    await sessions.open(other, 'other', 3)
    t.same(await sessions.get(opened[1]!.id, now), opened[1], 'other users\' sessions count apart')
  })

  t.test('sessions: a sign-in under a lower bound than the user\'s sessions were opened under (MAX_SESSIONS_PER_USER lowered) ends every one over it, the oldest first', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const userId = await account(users)
    const opened = []
    // More than a store reads of a user's sessions at once.
    for (let index = 0; index < 40; index += 1) {
      const session = { id: randomUUID(), userId, expiresAt: now + HOUR + index }
      await sessions.open(session, `token-${index}`, 1000)
      opened.push(session)
    }
    const last = { id: randomUUID(), userId, expiresAt: now + HOUR + 40 }
    await sessions.open(last, 'token-last', 3)
    const live = await Promise.all([...opened, last].map(async (session) => await sessions.get(session.id, now)))
    t.same(live.filter((session) => session !== undefined), [opened[38], opened[39], last])
    t.same(await sessions.rotateRefreshToken('token-0', 'x', now, 0), { status: 'unknown' }, 'the oldest\'s token with it')
  })

  // What a sweep forgets is each store's own test: the memory store's in memory/sessions.test.ts, Redis's expiry in
  // redis/store.test.ts (it has nothing to sweep).
  t.test('sessions: a sweep takes no live session', async (t) => {
    const { users, sessions } = await fresh(t)
    const now = Date.now()
    const ended = { id: randomUUID(), userId: await account(users), expiresAt: now + 50 }
    const live = { id: randomUUID(), userId: await account(users), expiresAt: now + HOUR }
    await sessions.open(ended, 'ended', 20)
    await sessions.open(live, 'live', 20)
    await sessions.sweep(now + 60, 10)
    t.same(await sessions.get(live.id, now + 60), live)
    t.match(await sessions.rotateRefreshToken('live', 'next', now + 60, 0), { status: 'rotated', session: live })
  })
}
