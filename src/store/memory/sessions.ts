import { isLive, MAX_PAIRS_PER_ROTATION, REMEMBERED_REPLACED_TOKENS } from '../rules.js'
import type { Session } from '../../domain.js'
import type { RefreshOutcome, SessionStore } from '../store.js'

interface SessionEntry {
  readonly session: Session
  /** Hashes of the refresh tokens valid now. */
  current: Set<string>
  /** Hashes the last rotation replaced, at `rotatedAt`: accepted again while the reuse leeway lasts. */
  previous: Set<string>
  rotatedAt: number
  /** Hashes replaced before that, newest last: presenting one is a replay. */
  replaced: string[]
}

export class MemorySessionStore implements SessionStore {
  // In opening order; every session of a process has the same lifetime, so that is also the order they end in.
  readonly #byId = new Map<string, SessionEntry>()
  // Every refresh token hash a live session remembers: current, previous and replaced.
  readonly #byTokenHash = new Map<string, SessionEntry>()
  // Session ids by user, oldest first.
  readonly #byUser = new Map<string, Set<string>>()

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    const entry: SessionEntry = { session: Object.freeze({ ...session }), current: new Set([refreshTokenHash]), previous: new Set(), rotatedAt: 0, replaced: [] }
    this.#byId.set(session.id, entry)
    this.#byTokenHash.set(refreshTokenHash, entry)
    const ofUser = this.#byUser.get(session.userId) ?? new Set()
    this.#byUser.set(session.userId, ofUser.add(session.id))
    for (const oldest of ofUser) {
      if (ofUser.size <= maxPerUser) break
      await this.revoke(oldest)
    }
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
    return { status: 'rotated', session: entry.session }
  }

  async revoke (id: string): Promise<void> {
    const entry = this.#byId.get(id)
    if (entry !== undefined) this.#forget(entry)
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

  #forget (entry: SessionEntry): void {
    const { id, userId } = entry.session
    this.#byId.delete(id)
    for (const hash of [...entry.current, ...entry.previous, ...entry.replaced]) this.#byTokenHash.delete(hash)
    const ofUser = this.#byUser.get(userId)
    ofUser?.delete(id)
    if (ofUser?.size === 0) this.#byUser.delete(userId)
  }
}
