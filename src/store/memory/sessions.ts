import { isLive, MAX_PAIRS_PER_ROTATION, REMEMBERED_REPLACED_TOKENS } from '../rules.js'
import type { Session } from '../../domain/index.js'
import { type RefreshOutcome, type SessionStore, UserRemovedError } from '../store.js'
import { type MemoryCapacity, sessionBytes } from './capacity.js'
import type { MemoryUserStore } from './users.js'

interface SessionEntry {
  readonly session: Session
  /** Hashes of the refresh tokens valid now. */
  current: Set<string>
  /** Hashes the last rotation replaced, at `rotatedAt`: accepted again while the reuse leeway lasts. */
  previous: Set<string>
  rotatedAt: number
  /** Hashes replaced before that, newest last: presenting one is a replay. */
  replaced: string[]
  /** What it is charged to its user's sessions. */
  bytes: number
}

const bytesOf = (entry: SessionEntry): number => sessionBytes(entry.current.size + entry.previous.size + entry.replaced.length)

export class MemorySessionStore implements SessionStore {
  // In opening order; every session of a process has the same lifetime, so that is also the order they end in.
  readonly #byId = new Map<string, SessionEntry>()
  // Every refresh token hash a live session remembers: current, previous and replaced.
  readonly #byTokenHash = new Map<string, SessionEntry>()
  // Session ids by user, oldest first.
  readonly #byUser = new Map<string, Set<string>>()
  readonly #capacity: MemoryCapacity
  readonly #users: MemoryUserStore

  constructor (capacity: MemoryCapacity, users: MemoryUserStore) {
    this.#capacity = capacity
    this.#users = users
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    if (this.#users.cached(session.userId) === undefined) throw new UserRemovedError(`user ${session.userId} has no account`)
    const entry: SessionEntry = { session: Object.freeze({ ...session }), current: new Set([refreshTokenHash]), previous: new Set(), rotatedAt: 0, replaced: [], bytes: 0 }
    entry.bytes = bytesOf(entry)
    const ofUser = this.#byUser.get(session.userId) ?? new Set()
    this.#endOldest(session.userId, entry.bytes, ofUser.size + 1 - maxPerUser)
    this.#byId.set(session.id, entry)
    this.#byTokenHash.set(refreshTokenHash, entry)
    this.#byUser.set(session.userId, ofUser.add(session.id))
    this.#capacity.chargeSessions(session.userId, entry.bytes)
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined || isLive(entry.session, now)) return entry?.session
    this.#forget(entry)
    return undefined
  }

  // An ended session is left to `get`, which forgets it.
  cached (id: string, now: number): Session | undefined {
    const session = this.#byId.get(id)?.session
    return session !== undefined && isLive(session, now) ? session : undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const entry = this.#byTokenHash.get(presentedHash)
    if (entry === undefined) return { status: 'unknown' }
    if (!isLive(entry.session, now)) {
      this.#forget(entry)
      return { status: 'unknown' }
    }
    if (entry.current.has(presentedHash)) {
      entry.replaced.push(...entry.previous)
      for (const forgotten of entry.replaced.splice(0, entry.replaced.length - REMEMBERED_REPLACED_TOKENS)) this.#byTokenHash.delete(forgotten)
      entry.previous = entry.current
      entry.current = new Set([nextHash])
      entry.rotatedAt = now
    } else if (entry.previous.has(presentedHash) && now - entry.rotatedAt < reuseLeewayMs) {
      if (entry.current.size >= MAX_PAIRS_PER_ROTATION) return { status: 'unknown' }
      entry.current.add(nextHash)
    } else {
      this.#forget(entry)
      return { status: 'reused' }
    }
    this.#byTokenHash.set(nextHash, entry)
    this.#recharge(entry)
    return { status: 'rotated', session: entry.session }
  }

  async revoke (id: string): Promise<void> {
    const entry = this.#byId.get(id)
    if (entry !== undefined) this.#forget(entry)
  }

  /** Ends every session of the user. */
  endAll (userId: string): void {
    for (const id of this.#byUser.get(userId) ?? []) this.#forget(this.#byId.get(id)!)
  }

  async sweep (now: number, limit: number): Promise<number> {
    let forgotten = 0
    for (const entry of this.#byId.values()) {
      if (forgotten === limit || isLive(entry.session, now)) break
      this.#forget(entry)
      forgotten += 1
    }
    return forgotten
  }

  // Ends the user's oldest sessions but `keep`: at least `count`, and as many as it takes for `bytes` more to fit
  // their room.
  #endOldest (userId: string, bytes: number, count: number, keep?: string): void {
    for (const oldest of this.#byUser.get(userId) ?? []) {
      if (count <= 0 && this.#capacity.sessionsRoom(userId) >= bytes) return
      const entry = oldest === keep ? undefined : this.#byId.get(oldest)
      if (entry !== undefined) this.#forget(entry)
      count -= 1
    }
  }

  // A rotation that grows a session past its user's room ends the user's oldest other sessions: one session alone
  // always fits (the configuration holds the room to at least the largest).
  #recharge (entry: SessionEntry): void {
    const { id, userId } = entry.session
    const grown = bytesOf(entry) - entry.bytes
    if (grown > 0) this.#endOldest(userId, grown, 0, id)
    entry.bytes += grown
    this.#capacity.chargeSessions(userId, grown)
  }

  #forget (entry: SessionEntry): void {
    const { id, userId } = entry.session
    this.#capacity.chargeSessions(userId, -entry.bytes)
    this.#byId.delete(id)
    for (const hash of [...entry.current, ...entry.previous, ...entry.replaced]) this.#byTokenHash.delete(hash)
    const ofUser = this.#byUser.get(userId)
    ofUser?.delete(id)
    if (ofUser?.size === 0) this.#byUser.delete(userId)
  }
}
