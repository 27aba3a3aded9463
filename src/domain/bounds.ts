import type { Session } from './index.js'

// What every store does alike, said once: the bounds a session's refresh tokens and a subscriber's deliveries keep
// to, and when a session ends.

/**
 * Reuse detection remembers this many refresh tokens per session after they were replaced; an older one is merely
 * unknown. Together with MAX_PAIRS_PER_ROTATION, this bounds what one session holds however often it refreshes.
 */
export const REMEMBERED_REPLACED_TOKENS = 16
/** How many pairs one rotation may fan out into while the reuse leeway lasts (parallel retries, several tabs). */
export const MAX_PAIRS_PER_ROTATION = 32
/** Deliveries each webhook subscriber keeps at most; past that, new events are dropped for it (and counted). */
export const PENDING_DELIVERIES = 10_000
/**
 * And bytes of their events, at most (src/store/outbox.ts's deliveryBytes: about 8 000 events of a typical item, 200
 * of the largest; in memory, where a character takes one or two bytes, 8 MB at most); past it too, new events are dropped.
 */
export const PENDING_DELIVERY_BYTES = 4 * 1024 * 1024

/**
 * Dead letters (deliveries whose last attempt failed) each subscriber keeps at most, for an operator to read and
 * deliver again; past that, the oldest goes (and is counted).
 */
export const DEAD_LETTERS = 1_000
/** Bytes of events (UTF-8) a subscriber's dead letters keep at most; past that, too, the oldest goes. */
export const DEAD_LETTER_BYTES = 8 * 1024 * 1024

/** What each store keeps of idempotency keys. */
export interface IdempotencyKeyBounds {
  /** How long a recorded create is remembered. */
  readonly ttlMs: number
  /** Keys one user holds at most; one more pushes out their oldest. */
  readonly perUser: number
}

/**
 * How long a create made under an idempotency key is remembered (a day, as the IETF draft suggests), and how many
 * keys each user keeps (the oldest out first); IDEMPOTENCY_KEY_TTL_SECONDS and MAX_IDEMPOTENCY_KEYS_PER_USER set them.
 */
export const IDEMPOTENCY_KEY_DEFAULTS: IdempotencyKeyBounds = { ttlMs: 86_400_000, perUser: 1000 }

/**
 * Client keys each rate limit keeps under its limit, and as many again over it (which new keys cannot push out):
 * a digest of an email or an address, so each of a bounded size.
 */
export const KEYS_PER_RATE_LIMIT = 50_000

/** A session serves until its end (milliseconds since the epoch), not at it. */
export const isLive = (session: Session, now: number): boolean => session.expiresAt > now
