// How a store's capacity is shared among accounts: requests and limits, as cgroup v2's memory.min and memory.max.
// The budget is cut in two parts. The floors' part is kept for the floors of accounts, those admitted and those yet
// to come: every account admitted is guaranteed its floor, which no other account can take. The shared part is what
// accounts draw on past their floors, up to each one's ceiling, first come. Neither part can take from the other:
// heavy accounts never leave a newcomer without a floor, and registrations never shrink what is shared.
// Part of each floor is kept for the account's sessions and refresh tokens, which are never refused: a sign-in or a
// refresh that would pass that part ends the account's own oldest sessions instead.
// Registrations are paced for the whole service once half of the floors are taken (before, room is plentiful and a
// burst of newcomers is never held back), so that no flood reserves the floors left in less than
// `registrationRoomMs`: a token bucket whose rate is the floors left over that time and whose size is a 24th of
// them (an hour's worth when the time is a day), so that each floor reserved slows the next ones: under any flood
// the floors left shrink no faster than (23/24)·e^(−t/room) of those left when the pace began, never to none within it.

export interface CapacityBounds {
  /** Bytes the store keeps at most for all accounts: the floors' part and the shared part. */
  readonly budgetBytes: number
  /** Bytes reserved for each account when it is admitted, its sessions' part included. */
  readonly floorBytes: number
  /** The part of each floor kept for the account's sessions: their bytes never pass it, nor draw on the rest. */
  readonly sessionsBytes: number
  /** Bytes one account may make the store keep at most beside its sessions. */
  readonly ceilingBytes: number
  /** The share of the budget kept for floors (0 to 1; FLOORS_SHARE when left out, none without floors). */
  readonly floorsShare?: number
  /** The least time a flood of registrations takes to reserve every floor left; unpaced when 0 or left out. */
  readonly registrationRoomMs?: number
}

/** The bounds as the configuration gives them: on Redis without a budget, one derived from its maxmemory. */
export type CapacitySettings = Omit<CapacityBounds, 'budgetBytes'> & { readonly budgetBytes?: number | undefined }

/** What a store has set aside and what is used, in bytes as the store holds them. */
export interface CapacityReading {
  readonly budgetBytes: number
  /** Everything accounts make the store keep, their sessions included. */
  readonly heldBytes: number
  /** The part of the budget kept for floors, those reserved and those yet to come; the rest is the shared part. */
  readonly floorsKeptBytes: number
  /** The floors of the accounts admitted, out of `floorsKeptBytes`. */
  readonly floorsBytes: number
  /** Held past their floors, out of the shared part (`budgetBytes - floorsKeptBytes`); sessions never are. */
  readonly sharedUsedBytes: number
  readonly accounts: number
  /**
   * Bytes refunds found missing from what their account was charged: 0 unless the ledger has drifted from what the
   * store keeps (on Redis, items kept from before items were charged are counted apart).
   */
  readonly driftBytes: number
}

/** No bound at all: a store built without bounds (embedding, the conformance suite) refuses nothing for size. */
export const UNBOUNDED: CapacityBounds = { budgetBytes: Infinity, floorBytes: 0, sessionsBytes: Infinity, ceilingBytes: Infinity }

/** The budget's share kept for floors unless the bounds say otherwise (ACCOUNT_FLOORS_PERCENT). */
export const FLOORS_SHARE = 0.5

/** Bytes of the budget kept for floors: none when accounts have no floor, all when nothing bounds them. */
export function floorsKept (bounds: CapacityBounds): number {
  if (bounds.floorBytes === 0) return 0
  return bounds.budgetBytes === Infinity ? Infinity : Math.floor(bounds.budgetBytes * (bounds.floorsShare ?? FLOORS_SHARE))
}

/** Bytes of the budget accounts share past their floors. */
export const sharedPart = (bounds: CapacityBounds): number =>
  bounds.budgetBytes === Infinity ? Infinity : bounds.budgetBytes - floorsKept(bounds)

/** How many accounts the floors' part admits in all (accounts with a floor). */
export const floorsAllowed = (bounds: CapacityBounds): number => Math.floor(floorsKept(bounds) / bounds.floorBytes)

/** The ledger as a charge reads it: the bounds, and what the shared part holds. */
export interface Ledger {
  readonly ceilingBytes: number
  readonly sharedPartBytes: number
  readonly sharedUsedBytes: number
  /** The part of each floor kept for its account's sessions. */
  readonly sessionsBytes: number
}

/** An account as the ledger keeps it: what it holds beside its sessions, and its floor (0 without one). */
export interface LedgerAccount {
  readonly bytes: number
  readonly floor: number
}

/**
 * What the shared part holds once `account` holds `next` bytes beside its sessions: what an account holds past the
 * rest of its floor (its floor less its sessions' part) draws on it. Said again in Lua, in the Redis store's commit
 * (src/store/redis/commit.ts), which checks it in the change's own atomic step.
 */
export function sharedUsedAfter (ledger: Ledger, account: LedgerAccount, next: number): number {
  const besideSessions = Math.max(0, account.floor - ledger.sessionsBytes)
  return ledger.sharedUsedBytes + Math.max(0, next - besideSessions) - Math.max(0, account.bytes - besideSessions)
}

/**
 * Why charging `account` `bytes` more would be refused: 'account' past its ceiling, 'shared' when it would need
 * more of the shared part than is left; undefined when it would not be (a refund never is).
 */
export function chargeRefused (ledger: Ledger, account: LedgerAccount, bytes: number): 'account' | 'shared' | undefined {
  if (bytes <= 0) return undefined
  if (account.bytes + bytes > ledger.ceilingBytes) return 'account'
  const sharedUsed = sharedUsedAfter(ledger, account, account.bytes + bytes)
  return sharedUsed > ledger.sharedUsedBytes && sharedUsed > ledger.sharedPartBytes ? 'shared' : undefined
}

/**
 * The idempotency records an account pushes out to make room for a charge its room cannot take: its oldest first
 * (`records`, those it may push out, oldest first), as many as it takes for `refused(freed)` to say no more; all it
 * needs or none (undefined, when even all of them would not do).
 */
export function recordsPushedOut<Record extends { readonly bytes: number }> (records: Iterable<Record>, refused: (freed: number) => boolean): Record[] | undefined {
  const pushedOut: Record[] = []
  let freed = 0
  for (const record of records) {
    pushedOut.push(record)
    freed += record.bytes
    if (!refused(freed)) return pushedOut
  }
  return undefined
}

/** The bucket of the registration pace: its tokens (registrations it lets through now) when last counted, and when. */
export interface RegistrationPace {
  tokens: number
  at: number
}

// The bucket holds this share of the floors left: a burst of newcomers is let through at once.
export const PACE_BURST_SHARE = 1 / 24
// The pace begins once the floors left are at most this share of all the floors' part admits.
export const PACE_FROM_FLOORS_LEFT_SHARE = 1 / 2

/**
 * Takes one registration from the pace's bucket: the bucket as it is after, or how long (ms) until one is let
 * through. `floorsLeft` (at least 1) spread over `roomMs` is the bucket's rate; PACE_BURST_SHARE of them its size.
 */
function takeRegistration (pace: RegistrationPace | undefined, floorsLeft: number, roomMs: number, now: number): RegistrationPace | number {
  const perMs = floorsLeft / roomMs
  const size = bucketSize(floorsLeft)
  const tokens = pace === undefined ? size : Math.min(size, pace.tokens + Math.max(0, now - pace.at) * perMs)
  if (tokens < 1) return Math.ceil((1 - tokens) / perMs)
  return { tokens: tokens - 1, at: now }
}

const bucketSize = (floorsLeft: number): number => Math.max(1, floorsLeft * PACE_BURST_SHARE)

/** What the pace on registrations reads: the floor's bytes, those of the floors reserved and kept, the room (ms), and its bucket. */
export interface PaceReading {
  readonly floorBytes: number
  readonly floorsBytes: number
  readonly floorsKeptBytes: number
  readonly roomMs: number
  readonly pace: RegistrationPace | undefined
}

/**
 * Whether the next account may be admitted at `now`, by the floors left and the pace: 'registration' when no floor is
 * left, the ms to wait while the pace holds it back; else the pace's bucket once it is let through (undefined when
 * nothing paces registrations: no floor, no room, no bound on the floors), and whether that bucket was counted from
 * the one read (`paced`: a store that shares it must write it only while it is as read).
 */
export function admission ({ floorBytes, floorsBytes, floorsKeptBytes, roomMs, pace }: PaceReading, now: number):
'registration' | number | { readonly pace: RegistrationPace | undefined, readonly paced: boolean } {
  if (floorBytes === 0) return { pace: undefined, paced: false }
  const floorsLeft = Math.floor((floorsKeptBytes - floorsBytes) / floorBytes)
  if (floorsLeft < 1) return 'registration'
  if (roomMs === 0 || !Number.isFinite(floorsLeft)) return { pace: undefined, paced: false }
  // While more than PACE_FROM_FLOORS_LEFT_SHARE of the floors are left nothing is paced, and the bucket stays full.
  if (floorsLeft > Math.floor(floorsKeptBytes / floorBytes) * PACE_FROM_FLOORS_LEFT_SHARE) return { pace: { tokens: bucketSize(floorsLeft), at: now }, paced: false }
  const taken = takeRegistration(pace, floorsLeft, roomMs, now)
  return typeof taken === 'number' ? taken : { pace: taken, paced: true }
}

/**
 * How long (ms) the pace holds the next registration back at `now`, changing nothing: 0 when it would let it
 * through, when nothing paces registrations, or when no floor is left (the registration is refused for that instead).
 */
export function registrationWait (reading: PaceReading, now: number): number {
  const admitted = admission(reading, now)
  return typeof admitted === 'number' ? admitted : 0
}
