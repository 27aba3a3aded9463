import { isLive } from '../../domain/bounds.js'
import type { Session } from '../../domain/index.js'
import { endedByOpening, type HeldSession, openedRecord, rotation, type SessionRecord, tokenHashes, type UserSessions } from '../../domain/sessions.js'
import { type RefreshOutcome, type SessionStore, UserRemovedError } from '../store.js'
import type { MemoryUserStore } from './users.js'

interface SessionEntry {
  record: SessionRecord
}

export class MemorySessionStore implements SessionStore {
  // In opening order; every session of a process has the same lifetime, so that is also the order they end in.
  readonly #byId = new Map<string, SessionEntry>()
  // Every refresh token hash a live session remembers: current, previous and replaced.
  readonly #byTokenHash = new Map<string, SessionEntry>()
  // Session ids by user, oldest first.
  readonly #byUser = new Map<string, Set<string>>()
  readonly #users: MemoryUserStore
  readonly #clock: () => number

  constructor (users: MemoryUserStore, clock: () => number) {
    this.#users = users
    this.#clock = clock
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    if (this.#users.cached(session.userId) === undefined) throw new UserRemovedError(`user ${session.userId} has no account`)
    const record = openedRecord(Object.freeze({ ...session }), refreshTokenHash)
    this.#end(endedByOpening(this.#userSessions(session.userId), maxPerUser, this.#clock()))
    const entry: SessionEntry = { record }
    this.#byId.set(session.id, entry)
    this.#byTokenHash.set(refreshTokenHash, entry)
    this.#byUser.set(session.userId, (this.#byUser.get(session.userId) ?? new Set()).add(session.id))
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined || isLive(entry.record.session, now)) return entry?.record.session
    this.#forget(entry)
    return undefined
  }

  // An ended session is left to `get`, which forgets it.
  cached (id: string, now: number): Session | undefined {
    const session = this.#byId.get(id)?.record.session
    return session !== undefined && isLive(session, now) ? session : undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const entry = this.#byTokenHash.get(presentedHash)
    const rotated = rotation(entry?.record, presentedHash, nextHash, now, reuseLeewayMs)
    if (rotated.status !== 'rotated' || entry === undefined) {
      if (entry !== undefined && (rotated.status === 'reused' || (rotated.status === 'unknown' && rotated.ended))) this.#forget(entry)
      return { status: rotated.status === 'reused' ? 'reused' : 'unknown' }
    }
    for (const hash of rotated.forgotten) this.#byTokenHash.delete(hash)
    entry.record = rotated.record
    this.#byTokenHash.set(nextHash, entry)
    return { status: 'rotated', session: entry.record.session }
  }

  async revoke (id: string): Promise<void> {
    this.#end([id])
  }

  /** Ends every session of the user. */
  endAll (userId: string): void {
    this.#end([...this.#byUser.get(userId) ?? []])
  }

  async sweep (now: number, limit: number): Promise<number> {
    let forgotten = 0
    for (const entry of this.#byId.values()) {
      if (forgotten === limit || isLive(entry.record.session, now)) break
      this.#forget(entry)
      forgotten += 1
    }
    return forgotten
  }

  #userSessions (userId: string): UserSessions {
    const ids = this.#byUser.get(userId) ?? new Set<string>()
    const byId = this.#byId
    function * sessions (): Generator<HeldSession> {
      for (const id of ids) {
        // Every session listed under its user has its entry: #forget takes both away.
        yield { id, expiresAt: byId.get(id)!.record.session.expiresAt }
      }
    }
    return { sessions: sessions(), count: ids.size }
  }

  #end (ids: readonly string[]): void {
    for (const id of ids) {
      const entry = this.#byId.get(id)
      if (entry !== undefined) this.#forget(entry)
    }
  }

  #forget (entry: SessionEntry): void {
    const { id, userId } = entry.record.session
    this.#byId.delete(id)
    for (const hash of tokenHashes(entry.record)) this.#byTokenHash.delete(hash)
    const ofUser = this.#byUser.get(userId)
    ofUser?.delete(id)
    if (ofUser?.size === 0) this.#byUser.delete(userId)
  }
}
