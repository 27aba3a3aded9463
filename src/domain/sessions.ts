// The rules of sessions and their refresh tokens, said once for every store: a store reads what a rule needs, in the
// shapes below, and commits what the rule answers in one atomic step of its own (src/store/memory/sessions.ts, src/store/redis/sessions.ts).
import type { Session } from './index.js'
import { isLive, MAX_PAIRS_PER_ROTATION, REMEMBERED_REPLACED_TOKENS } from './bounds.js'

/** A session and its refresh tokens, each by its hash. */
export interface SessionRecord {
  readonly session: Session
  /** Valid now. */
  readonly current: readonly string[]
  /** Replaced by the last rotation, at `rotatedAt`: accepted again while the reuse leeway lasts. */
  readonly previous: readonly string[]
  readonly rotatedAt: number
  /** Replaced before that, the newest last: presenting one is a replay. */
  readonly replaced: readonly string[]
}

/** A session just opened, with its first refresh token. */
export const openedRecord = (session: Session, tokenHash: string): SessionRecord => ({ session, current: [tokenHash], previous: [], rotatedAt: 0, replaced: [] })

/** Every token hash the session remembers. */
export const tokenHashes = ({ current, previous, replaced }: SessionRecord): string[] => [...current, ...previous, ...replaced]

export type Rotation =
  /** `record` replaces the session's, which forgets the hashes `forgotten`. */
  | { readonly status: 'rotated', readonly record: SessionRecord, readonly forgotten: readonly string[] }
  /** Nothing changes but, when `ended`, the session, past its end, is forgotten. */
  | { readonly status: 'unknown', readonly ended: boolean }
  /** A token the session replaced came back: the session is revoked. */
  | { readonly status: 'reused' }

/**
 * What presenting the refresh token `presented` for `next` does to `record`, the session that remembers it
 * (undefined: none does). SessionStore.rotateRefreshToken says the rule.
 */
export function rotation (record: SessionRecord | undefined, presented: string, next: string, now: number, reuseLeewayMs: number): Rotation {
  if (record === undefined) return { status: 'unknown', ended: false }
  if (!isLive(record.session, now)) return { status: 'unknown', ended: true }
  if (record.current.includes(presented)) {
    const replaced = [...record.replaced, ...record.previous]
    const forgotten = replaced.splice(0, replaced.length - REMEMBERED_REPLACED_TOKENS)
    return { status: 'rotated', record: { ...record, current: [next], previous: record.current, rotatedAt: now, replaced }, forgotten }
  }
  if (record.previous.includes(presented) && now - record.rotatedAt < reuseLeewayMs) {
    if (record.current.length >= MAX_PAIRS_PER_ROTATION) return { status: 'unknown', ended: false }
    return { status: 'rotated', record: { ...record, current: [...record.current, next] }, forgotten: [] }
  }
  return { status: 'reused' }
}

/** One of a user's sessions, as the rule of their count reads it. */
export interface HeldSession {
  readonly id: string
  readonly expiresAt: number
}

/** A user's sessions. */
export interface UserSessions {
  /**
   * Oldest first: every session of a deployment lives as long, so the first to end is the first opened. Read only as
   * far as a rule needs.
   */
  readonly sessions: Iterable<HeldSession>
  /** How many there are. */
  readonly count: number
}

/**
 * The sessions that opening one more for the user ends, the oldest first: those past their end that come first,
 * and at least as many as it takes to keep `maxPerUser`. With the tokens each remembers (REMEMBERED_REPLACED_TOKENS,
 * MAX_PAIRS_PER_ROTATION), this bounds what one account's sessions keep.
 */
export function endedByOpening ({ sessions, count }: UserSessions, maxPerUser: number, now: number): string[] {
  let over = count + 1 - maxPerUser
  const ended: string[] = []
  for (const { id, expiresAt } of sessions) {
    if (expiresAt > now && over <= 0) break
    ended.push(id)
    over -= 1
  }
  return ended
}
