import type { Redis, Result } from 'ioredis'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import { isLive } from '../rules.js'
import type { Session } from '../../domain/index.js'
import { endedByGrowth, endedByOpening, type HeldSession, openedRecord, type Rotation, rotation, type SessionRecord, tokenHashes, type UserSessions } from '../sessions.js'
import { type RefreshOutcome, type SessionStore, UserRemovedError } from '../store.js'
import { NO_BOUNDS, storedBytes } from './capacity.js'
import { call, type Script } from './commands.js'
import { Change, commit, retried, STALE, storeTime } from './commit.js'
import type { RedisKeys } from './keys.js'
import type { TrackedSessions } from './tracking.js'
import type { StoreWrites } from './writes.js'

export const sessionScripts = {
  // KEYS: users, the capacity totals, account session bytes, capacity charges. ARGV: the session, refresh-token and
  // user-sessions families (keys.ts), then a refresh token's hash, a session id and a user id, each '' when not
  // given: the session is the token's, or the one of the id; the user, the one given or the session's; then how many
  // of the user's sessions to list, the oldest first.
  // {session id, its fields (user, expires, rotated, current, previous, replaced), its charge and the bytes it
  // charges, user id, the user as JSON, the user's sessions listed (each {id, end, charge, bytes}), the bytes its
  // sessions are charged, the part of a floor kept for them, how many sessions it has}; '' for what there is none of.
  readSessions: {
    numberOfKeys: 4,
    lua: `
local families = {session = ARGV[1], refreshToken = ARGV[2], userSessions = ARGV[3]}
local sessionsPart = redis.call('HGET', KEYS[2], 'sessions')
if not sessionsPart then ${NO_BOUNDS} end
-- What a charge's entry ("<user id> <bytes> session") charges.
local function bytesOf (charge) return string.match(charge, '^%S+ (%d+)') or '0' end
local sessionId, fields, charge = ARGV[5], {}, ''
if ARGV[4] ~= '' then sessionId = redis.call('GET', families.refreshToken .. ARGV[4]) or '' end
if sessionId ~= '' then
  fields = redis.call('HMGET', families.session .. sessionId, 'user', 'expires', 'rotated', 'current', 'previous', 'replaced')
  charge = redis.call('HGET', KEYS[4], families.session .. sessionId) or ''
end
local userId = ARGV[6]
if userId == '' then userId = fields[1] or string.match(charge, '^%S*') end
if userId == '' then return {sessionId, fields, charge, bytesOf(charge), ''} end
local sessions, names = {}, {}
local listed = redis.call('ZRANGE', families.userSessions .. userId, 0, tonumber(ARGV[7]) - 1, 'WITHSCORES')
for index = 1, #listed, 2 do names[#names + 1] = families.session .. listed[index] end
local charges = #names > 0 and redis.call('HMGET', KEYS[4], unpack(names)) or {}
for index = 1, #names do sessions[index] = {listed[2 * index - 1], listed[2 * index], charges[index] or '', bytesOf(charges[index] or '')} end
return {sessionId, fields, charge, bytesOf(charge), userId, redis.call('HGET', KEYS[1], userId) or '', sessions, redis.call('HGET', KEYS[3], userId) or '', sessionsPart,
  redis.call('ZCARD', families.userSessions .. userId)}`
  },
  // ARGV: the session family, session ids. The token hashes of each: {current, previous, replaced}, '' for none.
  readSessionTokens: {
    numberOfKeys: 0,
    lua: `
local tokens = {}
for index = 2, #ARGV do
  local fields = redis.call('HMGET', ARGV[1] .. ARGV[index], 'current', 'previous', 'replaced')
  tokens[index - 1] = {fields[1] or '', fields[2] or '', fields[3] or ''}
end
return tokens`
  }
} as const satisfies Record<string, Script>

type ReadSessions = [sessionId: string, fields: Array<string | null>, charge: string, chargedBytes: string, userId: string, user?: string,
  sessions?: Array<[id: string, end: string, charge: string, chargedBytes: string]>, held?: string, sessionsPart?: string, count?: number]

declare module 'ioredis' {
  interface RedisCommander<Context> {
    readSessions (users: string, capacity: string, sessionBytes: string, charges: string, sessionFamily: string, refreshTokenFamily: string, userSessionsFamily: string,
      tokenHash: string, sessionId: string, userId: string, listed: number): Result<ReadSessions, Context>
    readSessionTokens (sessionFamily: string, ...ids: string[]): Result<Array<[current: string, previous: string, replaced: string]>, Context>
  }
}

/** One of a user's sessions as read, with its entry in the capacity charges (null: none), which the change guards. */
interface ListedSession extends HeldSession {
  readonly charge: string | null
}

/** A session as read with what forgetting it takes: its tokens, and its `current` field (null: its record is gone), guarded too. */
interface ReadSession extends ListedSession {
  readonly current: string | null
  readonly tokenHashes: readonly string[]
}

/** What the session rules read: the session, its user's sessions and their room. */
interface Read {
  /** The session of the token or id read, while its record or its charge is left; `record` while its record is. */
  readonly target: ReadSession | undefined
  readonly record: SessionRecord | undefined
  readonly userId: string | undefined
  /** The user's record, null when it has none (removed). */
  readonly user: string | null
  /** The oldest of the user's sessions, as many as were asked for. */
  readonly sessions: readonly ListedSession[]
  /** How many sessions the user has. */
  readonly count: number
  /** What the user's sessions are charged. */
  readonly held: number
  /** The same as Redis holds it (null: nothing): a session opened or grown since changes it. */
  readonly heldField: string | null
  /** The part of each floor kept for sessions. */
  readonly sessionsPart: number
}

const split = (text: string | null | undefined): string[] => text === null || text === undefined || text === '' ? [] : text.split(' ')
const orNull = (text: string | null | undefined): string | null => text === '' || text === undefined ? null : text
const listedSession = (id: string, end: string | null | undefined, charge: string, bytes: string): ListedSession =>
  ({ id, expiresAt: Number(end), bytes: Number(bytes), charge: orNull(charge) })
const withTokens = (listed: ListedSession, ...tokens: Array<string | null | undefined>): ReadSession =>
  ({ ...listed, current: orNull(tokens[0]), tokenHashes: tokens.flatMap(split) })

// The user's sessions a read lists first, the oldest: a rule that goes through them all has them read again, four
// times as many, so that a sign-in costs what the sessions it ends cost, not every session its user holds.
const SESSIONS_LISTED = 16

/**
 * The Redis store's sessions: each rule of src/store/sessions.ts run on what one script read, and committed as a
 * Change guarded by what it read. A session's keys and its charge are laid out in keys.ts.
 */
export class RedisSessionStore implements SessionStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #cache: TrackedSessions
  readonly #now: () => number
  // The changes this instance makes to one user's sessions (opening) or to one session (rotating) run one after
  // another, so that they never retry against each other: only other instances' can make one try again.
  readonly #inProgress = new PerKeyQueue()

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, cache: TrackedSessions, now: () => number) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#cache = cache
    this.#now = now
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    await this.#inProgress.run(`user ${session.userId}`, async () => await retried(`user ${session.userId}'s sessions`, async () => {
      const bytes = this.#bytes(openedRecord(session, refreshTokenHash), refreshTokenHash)
      const [read, ended] = await this.#read('', session.id, session.userId, (_read, user) => endedByOpening(user, bytes, maxPerUser, this.#now()))
      if (read.user === null) throw new UserRemovedError(`user ${session.userId} has no account`)
      const change = new Change().guard(this.#keys.users, session.userId, read.user)
      const sessionKey = this.#keys.session + session.id
      const userSessions = this.#keys.userSessions + session.userId
      const end = storeTime(session.expiresAt)
      const released = this.#forget(change, read, await this.#tokensOf(read, ended))
      change.write('HSET', sessionKey, 'user', session.userId, 'expires', String(session.expiresAt), 'rotated', '0', 'current', refreshTokenHash, 'previous', '', 'replaced', '')
        .write('PEXPIREAT', sessionKey, end)
        .write('SET', this.#keys.refreshToken + refreshTokenHash, session.id, 'PXAT', end)
        // Scored by their end: every session of a deployment lives as long, so the lowest is also the oldest.
        .write('ZADD', userSessions, String(session.expiresAt), session.id)
        // The set lives as long as its last session: its end set when it is new, and only ever moved on.
        .write('PEXPIREAT', userSessions, end, 'NX')
        .write('PEXPIREAT', userSessions, end, 'GT')
      return await this.#commit(change, read, released + this.#charge(change, session, bytes, read.target), ended)
    }))
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
    const decide = ({ record, target }: Read, user: UserSessions): { rotated: Rotation, ended: string[] } => {
      const rotated = rotation(record, presentedHash, nextHash, now, reuseLeewayMs)
      // A rotation that grows its session past its user's room ends the user's oldest others.
      const grown = rotated.status === 'rotated' && target !== undefined ? this.#bytes(rotated.record, presentedHash) - target.bytes : 0
      return { rotated, ended: target === undefined ? [] : endedByGrowth(user, target.id, grown, now) }
    }
    // The first read finds the session, whose changes this instance makes one after another (parallel refreshes
    // with the tokens of one rotation's pairs would otherwise all retry against each other); it is decided on once,
    // and read again only when it went stale while waiting.
    let first: [Read, ReturnType<typeof decide>] | undefined = await this.#read(presentedHash, '', '', decide)
    return await this.#inProgress.run(`session ${first[0].target?.id ?? presentedHash}`, async () => await retried('a session', async () => {
      const [read, { rotated, ended }] = first ?? await this.#read(presentedHash, '', '', decide)
      first = undefined
      const { target, record } = read
      if (rotated.status !== 'rotated' || record === undefined || target === undefined) {
        const outcome: RefreshOutcome = { status: rotated.status === 'reused' ? 'reused' : 'unknown' }
        // A session past its end, or a token whose session is gone, is forgotten with its token.
        if (target === undefined || (rotated.status === 'unknown' && !rotated.ended && record !== undefined)) return outcome
        const change = new Change().write('DEL', this.#keys.refreshToken + presentedHash)
        return await this.#commit(change, read, this.#forget(change, read, [target]), [target.id]) ?? outcome
      }
      const { session } = record
      const sessionKey = this.#keys.session + session.id
      const next = rotated.record
      const change = new Change()
        .write('HSET', sessionKey, 'rotated', String(next.rotatedAt), 'current', next.current.join(' '), 'previous', next.previous.join(' '), 'replaced', next.replaced.join(' '))
      for (const hash of rotated.forgotten) change.write('DEL', this.#keys.refreshToken + hash)
      change.write('SET', this.#keys.refreshToken + nextHash, session.id, 'PXAT', storeTime(session.expiresAt))
      const bytes = this.#bytes(next, presentedHash)
      const released = this.#forget(change, read, await this.#tokensOf(read, ended))
      return await this.#commit(change, read, released + this.#charge(change, session, bytes, target), ended) ?? { status: 'rotated', session }
    }))
  }

  async revoke (id: string): Promise<void> {
    await retried(`session ${id}`, async () => {
      const [read] = await this.#read('', id, '', () => undefined)
      if (read.target === undefined) return undefined
      const change = new Change()
      return await this.#commit(change, read, this.#forget(change, read, [read.target]), [id])
    })
    this.#cache.invalidate([id])
  }

  /**
   * Adds to `change` the end of every session of the user's (the account's removal), as read now, and what that
   * gives back of their charge: the sessions it ends.
   */
  async endAll (change: Change, userId: string): Promise<string[]> {
    const [read] = await this.#read('', '', userId, (_read, user) => [...user.sessions])
    const ended = await this.#tokensOf(read, read.sessions.map(({ id }) => id))
    // Made only while the user has no session but those read: one opened meanwhile is charged, and read next time.
    change.guard(this.#keys.accountSessionBytes, userId, read.heldField)
    const released = this.#forget(change, read, ended)
    if (released !== 0) change.charge(this.#keys.accountSessionBytes, userId, released, 0, this.#keys.capacity)
    return ended.map(({ id }) => id)
  }

  /** Redis forgets ended sessions by itself (each key expires with its session): there is nothing to sweep. */
  async sweep (): Promise<number> {
    return 0
  }

  // What the rules read, with the user's oldest sessions listed a page at a time: read again, with more listed,
  // while `decide` went through every one listed and the user has more.
  async #read<T> (tokenHash: string, sessionId: string, userId: string, decide: (read: Read, user: UserSessions) => T): Promise<[Read, T]> {
    for (let listed = SESSIONS_LISTED; ; listed *= 4) {
      const read = await this.#readListing(tokenHash, sessionId, userId, listed)
      const { sessions } = read
      const went = { through: false }
      function * oldestFirst (): Generator<HeldSession> {
        yield * sessions
        went.through = true
      }
      const decided = decide(read, { sessions: oldestFirst(), count: read.count, room: read.sessionsPart - read.held })
      if (!went.through || sessions.length === read.count) return [read, decided]
    }
  }

  async #readListing (tokenHash: string, sessionId: string, userId: string, listed: number): Promise<Read> {
    const keys = this.#keys
    const [id, fields, charge, chargedBytes, user, userRecord, sessions = [], held, sessionsPart, count = 0] = await call(this.#redis.readSessions(keys.users, keys.capacity,
      keys.accountSessionBytes, keys.capacityCharges, keys.session, keys.refreshToken, keys.userSessions, tokenHash, sessionId, userId, listed))
    const [owner, expires, rotatedAt, current, previous, replaced] = fields
    const target = id === '' || (owner == null && charge === '') ? undefined : withTokens(listedSession(id, expires, charge, chargedBytes), current, previous, replaced)
    return {
      target,
      record: owner == null ? undefined : { session: { id, userId: owner, expiresAt: Number(expires) }, current: split(current), previous: split(previous), rotatedAt: Number(rotatedAt), replaced: split(replaced) },
      userId: orNull(user) ?? undefined,
      user: orNull(userRecord),
      sessions: sessions.map((listed) => listedSession(...listed)),
      count,
      held: Number(held ?? 0),
      heldField: orNull(held),
      sessionsPart: Number(sessionsPart ?? 0)
    }
  }

  // The sessions of `ids` among the user's, as read, with their tokens, read now: only those a change ends are.
  async #tokensOf ({ sessions }: Read, ids: readonly string[]): Promise<ReadSession[]> {
    const ended = sessions.filter(({ id }) => ids.includes(id))
    if (ended.length === 0) return []
    const tokens = await call(this.#redis.readSessionTokens(this.#keys.session, ...ended.map(({ id }) => id)))
    // One answer for each session asked about.
    return ended.map((listed, index) => withTokens(listed, ...tokens[index]!))
  }

  // Bytes a session keeps: its hash (its user, times and token hashes), its id in its user's sessions, its name in
  // capacity-charges and -expiries; and for each token hash remembered, the refresh token's key and value and the
  // hash in the session's.
  #bytes (record: SessionRecord, tokenHash: string): number {
    const hashes = tokenHashes(record).length
    const name = Buffer.byteLength(this.#keys.session + record.session.id)
    const tokenKey = Buffer.byteLength(this.#keys.refreshToken + tokenHash)
    return storedBytes(4 * name + 64 + hashes * (2 * tokenKey + 64)) + 512 + 64 * hashes
  }

  // Forgets the sessions: their tokens, their records, their places among their user's sessions, their charges.
  // What that gives back to their user's sessions' charge (negative).
  #forget (change: Change, read: Read, sessions: readonly ReadSession[]): number {
    let released = 0
    for (const { id, current, charge, bytes, tokenHashes } of sessions) {
      const sessionKey = this.#keys.session + id
      change.guard(sessionKey, 'current', current).guard(this.#keys.capacityCharges, sessionKey, charge)
      for (const hash of tokenHashes) change.write('DEL', this.#keys.refreshToken + hash)
      change.write('DEL', sessionKey)
      // A session read has its user, from its record or its charge's entry.
      change.write('ZREM', this.#keys.userSessions + read.userId!, id)
      if (charge === null) continue
      change.write('HDEL', this.#keys.capacityCharges, sessionKey).write('ZREM', this.#keys.capacityExpiries, sessionKey)
      released -= bytes
    }
    return released
  }

  // Charges the session `bytes` until its end, in place of what it was charged as `read` (undefined: a session not
  // kept yet): what that adds to its user's sessions' charge.
  #charge (change: Change, session: Session, bytes: number, read: ReadSession | undefined): number {
    const sessionKey = this.#keys.session + session.id
    change.guard(sessionKey, 'current', read?.current ?? null).guard(this.#keys.capacityCharges, sessionKey, read?.charge ?? null)
      .write('HSET', this.#keys.capacityCharges, sessionKey, `${session.userId} ${bytes} session`)
      .write('ZADD', this.#keys.capacityExpiries, String(session.expiresAt), sessionKey)
    return bytes - (read?.bytes ?? 0)
  }

  // Commits the change, with `charged` bytes more charged to the user's sessions: within the part of the floor kept
  // for them, or, when what was read had passed it already (the bounds changed), within what the change leaves. The
  // sessions it ended are dropped from this instance's copies before Redis's invalidation reaches it. STALE when
  // what it read changed before it could commit.
  async #commit (change: Change, read: Read, charged: number, ended: readonly string[]): Promise<undefined | typeof STALE> {
    if (read.userId !== undefined && charged !== 0) {
      change.charge(this.#keys.accountSessionBytes, read.userId, charged, Math.max(read.sessionsPart, read.held + charged), this.#keys.capacity)
    }
    if (await commit(this.#redis, this.#writes, this.#keys, change) !== 1) return STALE
    if (ended.length > 0) this.#cache.invalidate([...ended])
    return undefined
  }
}
