import { HeaviestFirst } from './heaviest-first.js'
import { ClaimLostError, type ClaimOutcome, type IdempotencyClaim, type IdempotencyKeyStore, type Item } from './store.js'

interface Held {
  readonly userId: string
  readonly fingerprint: string
  /** The claiming request's token while it runs; undefined once its item is recorded. */
  readonly token: string | undefined
  readonly item: Item | undefined
  /** Milliseconds since the epoch: the end of a claim's lease, or of a record's time to live. */
  readonly until: number
  /** What it holds that varies in size: its key and its item's text, in characters. */
  readonly characters: number
}

export interface MemoryIdempotencyKeyBounds {
  /** How long a recorded create is remembered. */
  ttlMs: number
  /** Keys one user holds at most; one more pushes out their oldest. */
  perUser: number
  /**
   * Keys the store holds at most, and characters of keys and items; past either, the oldest key of the user who
   * holds the most goes.
   */
  total: number
  characters: number
}

// One entry per user and key: the user id is a UUID, so it never contains the separator.
const entryKey = ({ userId, key }: IdempotencyClaim): string => `${userId} ${key}`
// A record keeps its item as it was made: once the item is edited, its text is held twice.
const charactersOf = (claim: IdempotencyClaim, item?: Item): number =>
  claim.key.length + (item === undefined ? 0 : item.name.length + (item.description?.length ?? 0))
// What a user holds, for the store's bounds: its characters, and as many again for each entry, so that many small
// keys weigh as well as a few large ones.
const ENTRY_WEIGHT = 256
const weightOf = (held: Held): number => held.characters + ENTRY_WEIGHT

/**
 * The idempotency keys of one process. Every key is one entry of one map, in the order it was claimed or recorded,
 * and one of its user's set, in the same order: so a user's oldest goes first in O(1), and an expired entry at the
 * front goes with the next claim (any other when it is next looked up). At the store's bounds, the key that goes is
 * the oldest of the user who holds the most (in O(log users)): one user's keys never push out another's while the
 * first holds more, so no caller can make another's retry create twice by filling the store.
 */
export class MemoryIdempotencyKeys implements IdempotencyKeyStore {
  readonly #bounds: MemoryIdempotencyKeyBounds
  readonly #entries = new Map<string, Held>()
  readonly #byUser = new Map<string, Set<string>>()
  readonly #holders = new HeaviestFirst<string>()
  #characters = 0

  constructor (bounds: MemoryIdempotencyKeyBounds) {
    this.#bounds = bounds
  }

  async claim (claim: IdempotencyClaim, leaseMs: number): Promise<ClaimOutcome> {
    const now = Date.now()
    this.#forgetExpired(now)
    const held = this.#held(entryKey(claim), now)
    if (held === undefined) {
      this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: claim.token, item: undefined, until: now + leaseMs, characters: charactersOf(claim) })
      return { status: 'claimed' }
    }
    if (held.fingerprint !== claim.fingerprint) return { status: 'mismatch' }
    return held.item === undefined ? { status: 'running' } : { status: 'recorded', item: held.item }
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    const key = entryKey(claim)
    if (this.#entries.get(key)?.token === claim.token) this.#forget(key, claim.userId)
  }

  /** Throws a ClaimLostError unless the claim holds its key: called before the item is added. */
  assertHeld (claim: IdempotencyClaim): void {
    const held = this.#held(entryKey(claim), Date.now())
    if (held !== undefined && held.token !== claim.token) throw new ClaimLostError(`idempotency key ${claim.key} is held by another request`)
  }

  /** Records the item the claim's request made under its key, for the time to live. */
  record (claim: IdempotencyClaim, item: Item): void {
    this.#forget(entryKey(claim), claim.userId)
    const until = Date.now() + this.#bounds.ttlMs
    this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: undefined, item, until, characters: charactersOf(claim, item) })
  }

  #held (key: string, now: number): Held | undefined {
    const held = this.#entries.get(key)
    if (held === undefined || held.until > now) return held
    this.#forget(key, held.userId)
    return undefined
  }

  #hold (claim: IdempotencyClaim, held: Held): void {
    const key = entryKey(claim)
    this.#entries.set(key, held)
    this.#characters += held.characters
    this.#holders.add(claim.userId, weightOf(held))
    const ofUser = this.#byUser.get(claim.userId) ?? new Set()
    this.#byUser.set(claim.userId, ofUser.add(key))
    if (ofUser.size > this.#bounds.perUser) this.#forget(this.#oldestOf(claim.userId), claim.userId)
    while (this.#entries.size > this.#bounds.total || this.#characters > this.#bounds.characters) {
      const heaviest = this.#holders.heaviest()!
      this.#forget(this.#oldestOf(heaviest), heaviest)
    }
  }

  #forgetExpired (now: number): void {
    for (const [key, held] of this.#entries) {
      if (held.until > now) return
      this.#forget(key, held.userId)
    }
  }

  // Sets iterate in insertion order: the first is the user's oldest.
  #oldestOf (userId: string): string {
    return this.#byUser.get(userId)!.values().next().value!
  }

  // A key is in the map exactly when it is in its user's set.
  #forget (key: string, userId: string): void {
    const held = this.#entries.get(key)
    if (held === undefined) return
    this.#entries.delete(key)
    this.#characters -= held.characters
    this.#holders.add(userId, -weightOf(held))
    const ofUser = this.#byUser.get(userId)!
    ofUser.delete(key)
    if (ofUser.size === 0) this.#byUser.delete(userId)
  }
}
