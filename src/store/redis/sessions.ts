import type { Redis } from 'ioredis'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import { isLive } from '../../domain/bounds.js'
import type { Session } from '../../domain/index.js'
import { endedByOpening, type HeldSession, type Rotation, rotation, type SessionRecord, type UserSessions } from '../../domain/sessions.js'
import { type RefreshOutcome, type SessionStore, UserRemovedError } from '../store.js'
import { call, scored, transaction } from './commands.js'
import { Change, commit, retried, STALE, storeTime } from './commit.js'
import type { RedisKeys } from './keys.js'
import type { TrackedSessions } from './tracking.js'
import type { StoreWrites } from './writes.js'

// A session's fields (keys.ts, session), in the order the rules read them, and as HMGET answers them.
const SESSION_FIELDS = ['user', 'expires', 'rotated', 'current', 'previous', 'replaced'] as const
type Answered<Fields extends readonly string[]> = { -readonly [Index in keyof Fields]: string | null }
type SessionFields = Answered<typeof SESSION_FIELDS>

/** A session as read with what forgetting it takes: its tokens, and its `current` field (null: its record is gone), guarded. */
interface ReadSession extends HeldSession {
  readonly current: string | null
  readonly tokenHashes: readonly string[]
}

/** What the session rules read: the session, and its user's sessions. */
interface Read {
  /** The session of the token or id read, and its record, while it has one. */
  readonly target: ReadSession | undefined
  readonly record: SessionRecord | undefined
  readonly userId: string | undefined
  /** The user's record, null when it has none (removed) or none was given to read. */
  readonly user: string | null
  /** The oldest of the user's sessions, as many as were asked for, when a user was given to read. */
  readonly sessions: readonly HeldSession[]
  /** How many sessions the user has. */
  readonly count: number
}

const split = (text: string | null): string[] => text === null || text === '' ? [] : text.split(' ')
// A session's `current`, `previous` and `replaced` fields, as HMGET answers them.
type TokenFields = [current: string | null, previous: string | null, replaced: string | null]
const withTokens = (listed: HeldSession, ...tokens: TokenFields): ReadSession => ({ ...listed, current: tokens[0], tokenHashes: tokens.flatMap(split) })

// The user's sessions a read lists first, the oldest: a rule that goes through them all has them read again, four
// times as many, so that a sign-in costs what the sessions it ends cost, not every session its user holds.
const SESSIONS_LISTED = 16

/**
 * The Redis store's sessions: each rule of src/domain/sessions.ts run on what was read, and committed as a
 * Change guarded by what it read. A session's keys are laid out in keys.ts.
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
      const [read, ended] = await this.#read('', session.id, session.userId, (_read, user) => endedByOpening(user, maxPerUser, this.#now()))
      if (read.user === null) throw new UserRemovedError(`user ${session.userId} has no account`)
      const change = new Change().guard(this.#keys.users, session.userId, read.user)
      const sessionKey = this.#keys.session + session.id
      const userSessions = this.#keys.userSessions + session.userId
      const end = storeTime(session.expiresAt)
      this.#forget(change, read, await this.#tokensOf(read, ended))
      // Made only while the session is as read (none, but for an id given again).
      change.guard(sessionKey, 'current', read.target?.current ?? null).write('HSET', sessionKey, 'user', session.userId, 'expires', String(session.expiresAt), 'rotated', '0', 'current', refreshTokenHash, 'previous', '', 'replaced', '')
        .write('PEXPIREAT', sessionKey, end)
        .write('SET', this.#keys.refreshToken + refreshTokenHash, session.id, 'PXAT', end)
        // Scored by their end: every session of a deployment lives as long, so the lowest is also the oldest.
        .write('ZADD', userSessions, String(session.expiresAt), session.id)
        // The set lives as long as its last session: its end set when it is new, and only ever moved on.
        .write('PEXPIREAT', userSessions, end, 'NX')
        .write('PEXPIREAT', userSessions, end, 'GT')
      return await this.#commit(change, ended)
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
    const decide = ({ record }: Read): Rotation => rotation(record, presentedHash, nextHash, now, reuseLeewayMs)
    // The first read finds the session, whose changes this instance makes one after another (parallel refreshes
    // with the tokens of one rotation's pairs would otherwise all retry against each other); it is decided on once,
    // and read again only when it went stale while waiting.
    let first: [Read, ReturnType<typeof decide>] | undefined = await this.#read(presentedHash, '', '', decide)
    return await this.#inProgress.run(`session ${first[0].target?.id ?? presentedHash}`, async () => await retried('a session', async () => {
      const [read, rotated] = first ?? await this.#read(presentedHash, '', '', decide)
      first = undefined
      const { target, record } = read
      if (rotated.status !== 'rotated' || record === undefined || target === undefined) {
        const outcome: RefreshOutcome = { status: rotated.status === 'reused' ? 'reused' : 'unknown' }
        // A session past its end, or a token whose session is gone, is forgotten with its token.
        if (target === undefined || (rotated.status === 'unknown' && !rotated.ended && record !== undefined)) return outcome
        const change = new Change().write('DEL', this.#keys.refreshToken + presentedHash)
        this.#forget(change, read, [target])
        return await this.#commit(change, [target.id]) ?? outcome
      }
      const { session } = record
      const sessionKey = this.#keys.session + session.id
      const next = rotated.record
      const change = new Change().guard(sessionKey, 'current', target.current)
        .write('HSET', sessionKey, 'rotated', String(next.rotatedAt), 'current', next.current.join(' '), 'previous', next.previous.join(' '), 'replaced', next.replaced.join(' '))
      for (const hash of rotated.forgotten) change.write('DEL', this.#keys.refreshToken + hash)
      change.write('SET', this.#keys.refreshToken + nextHash, session.id, 'PXAT', storeTime(session.expiresAt))
      return await this.#commit(change, []) ?? { status: 'rotated', session }
    }))
  }

  async revoke (id: string): Promise<void> {
    await retried(`session ${id}`, async () => {
      const [read] = await this.#read('', id, '', () => undefined)
      if (read.target === undefined) return undefined
      const change = new Change()
      this.#forget(change, read, [read.target])
      return await this.#commit(change, [id])
    })
    this.#cache.invalidate([id])
  }

  /**
   * Adds to `change` the end of every session of the user's (the account's removal), as read now: the sessions it
   * ends. One opened after the read and before the change is ended by `endAll` once the user is gone.
   */
  async endAllIn (change: Change, userId: string): Promise<string[]> {
    const [read] = await this.#read('', '', userId, (_read, user) => [...user.sessions])
    const ended = await this.#tokensOf(read, read.sessions.map(({ id }) => id))
    this.#forget(change, read, ended)
    return ended.map(({ id }) => id)
  }

  /** Ends every session of a user who has no account: none can open after (each opening is guarded by the user). */
  async endAll (userId: string): Promise<void> {
    await retried(`user ${userId}'s sessions`, async () => {
      const [read] = await this.#read('', '', userId, (_read, user) => [...user.sessions])
      if (read.sessions.length === 0) return undefined
      const change = new Change()
      const ended = await this.#tokensOf(read, read.sessions.map(({ id }) => id))
      this.#forget(change, read, ended)
      return await this.#commit(change, ended.map(({ id }) => id))
    })
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
      const decided = decide(read, { sessions: oldestFirst(), count: read.count })
      if (!went.through || sessions.length === read.count) return [read, decided]
    }
  }

  // The session is the token's, or the one of the id given ('' for none); the user, the one given or the session's.
  // A user given has their record and sessions read with the session, in one transaction: the rules that name no
  // user (a refresh, a logout) decide on the session alone. What changes between two reads is what the commit's
  // guards catch, as they do what changes after.
  async #readListing (tokenHash: string, sessionId: string, userId: string, listed: number): Promise<Read> {
    const keys = this.#keys
    const id = tokenHash === '' ? sessionId : await call(this.#redis.get(keys.refreshToken + tokenHash)) ?? ''
    // With no id, the key read is one no session has.
    const [fields, listing = [], userRecord = null, count = 0] = (userId === ''
      ? [await call(this.#redis.hmget(keys.session + id, ...SESSION_FIELDS))]
      : await transaction(this.#redis.multi().hmget(keys.session + id, ...SESSION_FIELDS).zrange(keys.userSessions + userId, '0', String(listed - 1), 'WITHSCORES')
        .hget(keys.users, userId).zcard(keys.userSessions + userId))) as [SessionFields, string[]?, (string | null)?, number?]
    const [owner, expires, rotatedAt, current, previous, replaced] = fields
    const target = id === '' || owner == null ? undefined : withTokens({ id, expiresAt: Number(expires) }, current, previous, replaced)
    return {
      target,
      record: owner == null ? undefined : { session: { id, userId: owner, expiresAt: Number(expires) }, current: split(current), previous: split(previous), rotatedAt: Number(rotatedAt), replaced: split(replaced) },
      userId: userId === '' ? owner ?? undefined : userId,
      user: userRecord,
      sessions: scored(listing).map(({ member, score }) => ({ id: member, expiresAt: score })),
      count
    }
  }

  // The sessions of `ids` among the user's, as read, with their tokens, read now: only those a change ends are.
  async #tokensOf ({ sessions }: Read, ids: readonly string[]): Promise<ReadSession[]> {
    // Sent together, one round trip: the commit is guarded by each session's token as read, not by a read of them all at once.
    return await Promise.all(sessions.filter(({ id }) => ids.includes(id)).map(async (listed) =>
      withTokens(listed, ...await call(this.#redis.hmget(this.#keys.session + listed.id, 'current', 'previous', 'replaced')) as TokenFields)))
  }

  // Forgets the sessions: their tokens, their records, their places among their user's sessions.
  #forget (change: Change, read: Read, sessions: readonly ReadSession[]): void {
    for (const { id, current, tokenHashes } of sessions) {
      const sessionKey = this.#keys.session + id
      change.guard(sessionKey, 'current', current)
      for (const hash of tokenHashes) change.write('DEL', this.#keys.refreshToken + hash)
      // A session read has its user, from its record.
      change.write('DEL', sessionKey).write('ZREM', this.#keys.userSessions + read.userId!, id)
    }
  }

  // Commits the change. The sessions it ended are dropped from this instance's copies before Redis's invalidation
  // reaches it. STALE when what it read changed before it could commit.
  async #commit (change: Change, ended: readonly string[]): Promise<undefined | typeof STALE> {
    if (await commit(this.#redis, this.#writes, this.#keys, change) !== 1) return STALE
    if (ended.length > 0) this.#cache.invalidate([...ended])
    return undefined
  }
}
