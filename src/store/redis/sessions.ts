import type { Redis, Result } from 'ioredis'
import { isLive, MAX_PAIRS_PER_ROTATION, REMEMBERED_REPLACED_TOKENS } from '../rules.js'
import type { Session } from '../../domain/index.js'
import { type RefreshOutcome, type SessionStore, UserRemovedError } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import type { RedisKeys } from './keys.js'
import type { TrackedSessions } from './tracking.js'
import { type StoreWrites, writeScript } from './writes.js'

// Defined in the session scripts (writeScript), after CAPACITY: ARGV[1..3] are the prefixes of the session,
// refresh-token and user-sessions keys (keys.ts), for the keys a script finds in what it reads. `forget` forgets a
// session: its refresh tokens, its record, its place among its user's sessions, its charge; and lists it in
// `ended`, which the script answers (space-separated) for the instance to drop its copies at once, before Redis's
// invalidation reaches it. `endOldest` ends the user's oldest sessions but `keep`, at least `count` of them, and as
// many as it takes for `bytes` more to fit the part of the user's floor kept for sessions.
export const FORGET_SESSION = `
local families = {session = ARGV[1], refreshToken = ARGV[2], userSessions = ARGV[3]}
local ended = {}
local function forget (sessionId)
  local sessionKey = families.session .. sessionId
  local fields = redis.call('HMGET', sessionKey, 'user', 'current', 'previous', 'replaced')
  releaseCharge(sessionKey)
  if not fields[1] then return end
  ended[#ended + 1] = sessionId
  for i = 2, 4 do
    for hash in string.gmatch(fields[i], '%S+') do redis.call('DEL', families.refreshToken .. hash) end
  end
  redis.call('DEL', sessionKey)
  redis.call('ZREM', families.userSessions .. fields[1], sessionId)
end
local function endOldest (userId, bytes, count, keep)
  for _, oldest in ipairs(redis.call('ZRANGE', families.userSessions .. userId, 0, -1)) do
    if count <= 0 and sessionsRoom(userId) >= bytes then return end
    if oldest ~= keep then forget(oldest) end
    count = count - 1
  end
end
`

export const sessionScripts = {
  // KEYS: session, its first refresh token, its user's sessions, users, the capacity keys (CAPACITY). ARGV:
  // (FORGET_SESSION), session id, user id, end (ms), token hash, sessions a user may have. The sessions it ended,
  // or nil, opening none, when the user has no account (removed).
  openSession: {
    numberOfKeys: 4 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY + FORGET_SESSION, `
capacityAt(5)
local sessionId, userId, expiresAt, hash = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if redis.call('HEXISTS', KEYS[4], userId) == 0 then return false end
for _, ended in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do releaseCharge(families.session .. ended) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local bytes = sessionBytes(KEYS[1], KEYS[2], 1)
endOldest(userId, bytes, redis.call('ZCARD', KEYS[3]) + 1 - tonumber(ARGV[8]))
redis.call('HSET', KEYS[1], 'user', userId, 'expires', expiresAt, 'rotated', 0, 'current', hash, 'previous', '', 'replaced', '')
-- Redis expires the keys on its own clock (WRITE_DEADLINE's clockAhead).
redis.call('PEXPIREAT', KEYS[1], expiresAt - clockAhead)
redis.call('SET', KEYS[2], sessionId, 'PXAT', expiresAt - clockAhead)
-- Scored by their end: every session of a deployment lives as long, so the lowest is also the oldest.
redis.call('ZADD', KEYS[3], expiresAt, sessionId)
redis.call('PEXPIREAT', KEYS[3], redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2] - clockAhead)
chargeSessionUntil(KEYS[1], userId, bytes, expiresAt)
return table.concat(ended, ' ')`)
  },
  // KEYS: the presented token, the capacity keys. ARGV: (FORGET_SESSION), presented hash, next hash, now (ms, Redis's
  // clock as the instance reckons it: see Store.now), reuse leeway (ms), replaced tokens remembered, pairs per
  // rotation. {status, the sessions it ended, session id, user id, end}.
  rotateRefreshToken: {
    numberOfKeys: 1 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY + FORGET_SESSION, `
capacityAt(2)
local presented, nextHash, now, leeway = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local sessionId = redis.call('GET', KEYS[1])
if not sessionId then return {'unknown', ''} end
local sessionKey = families.session .. sessionId
local session = redis.call('HMGET', sessionKey, 'user', 'expires', 'rotated', 'current', 'previous', 'replaced')
if not session[1] or tonumber(session[2]) <= now then
  forget(sessionId)
  redis.call('DEL', KEYS[1])
  return {'unknown', table.concat(ended, ' ')}
end
local function split (text)
  local list = {}
  for hash in string.gmatch(text, '%S+') do list[#list + 1] = hash end
  return list
end
local function contains (list, wanted)
  for _, hash in ipairs(list) do if hash == wanted then return true end end
  return false
end
local current, previous, replaced, rotatedAt = split(session[4]), split(session[5]), split(session[6]), tonumber(session[3])
if contains(current, presented) then
  for _, hash in ipairs(previous) do replaced[#replaced + 1] = hash end
  while #replaced > tonumber(ARGV[8]) do redis.call('DEL', families.refreshToken .. table.remove(replaced, 1)) end
  previous, current, rotatedAt = current, {nextHash}, now
elseif contains(previous, presented) and now - rotatedAt < leeway then
  if #current >= tonumber(ARGV[9]) then return {'unknown', ''} end
  current[#current + 1] = nextHash
else
  forget(sessionId)
  return {'reused', table.concat(ended, ' ')}
end
redis.call('HSET', sessionKey, 'rotated', rotatedAt, 'current', table.concat(current, ' '),
  'previous', table.concat(previous, ' '), 'replaced', table.concat(replaced, ' '))
redis.call('SET', families.refreshToken .. nextHash, sessionId, 'PXAT', session[2] - clockAhead)
-- A session that grows past its user's room ends the user's oldest others: one alone always fits (the
-- configuration holds the room to at least the largest).
local bytes = sessionBytes(sessionKey, KEYS[1], #current + #previous + #replaced)
local _, charged = chargeOf(sessionKey)
if bytes > charged then endOldest(session[1], bytes - charged, 0, sessionId) end
chargeSessionUntil(sessionKey, session[1], bytes, session[2])
return {'rotated', table.concat(ended, ' '), sessionId, session[1], session[2]}`)
  },
  // KEYS: the capacity keys. ARGV: (FORGET_SESSION), session id.
  revokeSession: {
    numberOfKeys: CAPACITY_KEYS,
    lua: writeScript(CAPACITY + FORGET_SESSION, `
capacityAt(1)
forget(ARGV[4])
return 1`)
  }
} as const satisfies Record<string, Script>

/** The key prefixes FORGET_SESSION takes. */
export type SessionFamilies = [session: string, refreshToken: string, userSessions: string]

declare module 'ioredis' {
  interface RedisCommander<Context> {
    openSession (session: string, token: string, userSessions: string, users: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, ...SessionFamilies, id: string,
      userId: string, expiresAt: number, tokenHash: string, maxPerUser: number]): Result<string, Context>
    rotateRefreshToken (token: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, ...SessionFamilies, presentedHash: string, nextHash: string,
      now: number, reuseLeewayMs: number, remembered: number, maxPairs: number]): Result<[string, string, string?, string?, string?], Context>
    revokeSession (...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, ...SessionFamilies, id: string]): Result<1, Context>
  }
}

export class RedisSessionStore implements SessionStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #families: SessionFamilies
  readonly #cache: TrackedSessions

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, cache: TrackedSessions) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#families = [keys.session, keys.refreshToken, keys.userSessions]
    this.#cache = cache
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    const keys = this.#keys
    const ended = await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.openSession(keys.session + session.id, keys.refreshToken + refreshTokenHash,
      keys.userSessions + session.userId, keys.users, ...capacityKeys(keys), deadline, outcomeKey, ...this.#families, session.id, session.userId, session.expiresAt,
      refreshTokenHash, maxPerUser))
    if (ended === null) throw new UserRemovedError(`user ${session.userId} has no account`)
    this.#forgetEnded(ended)
  }

  cached (id: string, now: number): Session | undefined {
    const session = this.#cache.get(id)
    return session !== undefined && isLive(session, now) ? session : undefined
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const cached = this.#cache.get(id)
    if (cached !== undefined) return isLive(cached, now) ? cached : undefined
    const readAt = this.#cache.epoch
    const [userId, expires] = await call(this.#redis.hmget(this.#keys.session + id, 'user', 'expires'))
    if (userId === null || userId === undefined) return undefined
    const session = { id, userId, expiresAt: Number(expires) }
    this.#cache.keep(session, readAt)
    return isLive(session, now) ? session : undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const [status, ended, id, userId, expires] = await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.rotateRefreshToken(
      this.#keys.refreshToken + presentedHash, ...capacityKeys(this.#keys), deadline, outcomeKey, ...this.#families, presentedHash, nextHash, now, reuseLeewayMs,
      REMEMBERED_REPLACED_TOKENS, MAX_PAIRS_PER_ROTATION))
    this.#forgetEnded(ended)
    if (status === 'rotated' && id !== undefined && userId !== undefined) {
      return { status, session: { id, userId, expiresAt: Number(expires) } }
    }
    return { status: status === 'reused' ? 'reused' : 'unknown' }
  }

  async revoke (id: string): Promise<void> {
    await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.revokeSession(...capacityKeys(this.#keys), deadline, outcomeKey, ...this.#families, id))
    this.#cache.invalidate([id])
  }

  // The sessions a script ended, dropped from this instance's copies before Redis's invalidation reaches it.
  #forgetEnded (ended: string): void {
    if (ended !== '') this.#cache.invalidate(ended.split(' '))
  }

  /** Redis forgets ended sessions by itself (each key expires with its session): there is nothing to sweep. */
  async sweep (): Promise<number> {
    return 0
  }
}
