import type { Item } from '../../domain.js'
import { storedItem } from '../../serialized.js'
import { ClaimLostError, type ClaimOutcome, type IdempotencyClaim, type IdempotencyKeyStore, StoreFullError } from '../store.js'

interface Held {
  readonly userId: string
  readonly fingerprint: string
  /** The claiming request's token while it runs; undefined once its item is recorded. */
  readonly token: string | undefined
  /**
   * The recorded item's fields, without its text: what its claim reserved room for (the text is made again for a
   * replay), so that an item edited or removed since leaves no text behind that no bound counts.
   */
  readonly item: Item | undefined
  /** Milliseconds since the epoch: the end of a claim's lease, or of a record's time to live. */
  readonly until: number
  /** What it holds that varies in size, in characters, reserved when it is claimed (IdempotencyClaim.characters). */
  readonly characters: number
}

interface UserKeys {
  /** In the order they were claimed or recorded: the first is the oldest. */
  readonly keys: Set<string>
  characters: number
}

export interface MemoryIdempotencyKeyBounds {
  /** How long a recorded create is remembered. */
  ttlMs: number
  /** Keys one user holds at most; one more pushes out their oldest. */
  perUser: number
  /** Characters of keys and items one user holds at most; past it, too, their oldest goes. */
  perUserCharacters: number
  /** Keys, and characters of keys and items, the store holds at most; past either, a new key is refused (507). */
  total: number
  characters: number
}

// One entry per user and key: the user id is a UUID, so it never contains the separator.
const entryKey = ({ userId, key }: IdempotencyClaim): string => `${userId} ${key}`

/**
 * The idempotency keys of one process. Every key is one entry of one map, in the order it was claimed or recorded,
 * and one of its user's set, in the same order: so a user's oldest goes first in O(1), and an expired entry at the
 * front goes with the next claim (any other when it is next looked up). A user's own bounds push out only that
 * user's oldest keys; once the store's bounds are reached, a new key is refused (StoreFullError) and no record is
 * forgotten before its time to live: however many accounts fill the store, no one's retry creates twice.
 */
export class MemoryIdempotencyKeys implements IdempotencyKeyStore {
  readonly #bounds: MemoryIdempotencyKeyBounds
  readonly #entries = new Map<string, Held>()
  readonly #byUser = new Map<string, UserKeys>()
  #characters = 0

  constructor (bounds: MemoryIdempotencyKeyBounds) {
    this.#bounds = bounds
  }

  async claim (claim: IdempotencyClaim, leaseMs: number): Promise<ClaimOutcome> {
    const now = Date.now()
    this.#forgetExpired(now)
    const held = this.#held(entryKey(claim), now)
    if (held === undefined) {
      this.#makeRoom(claim)
      this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: claim.token, item: undefined, until: now + leaseMs, characters: claim.characters })
      return { status: 'claimed' }
    }
    if (held.fingerprint !== claim.fingerprint) return { status: 'mismatch' }
    return held.item === undefined ? { status: 'running' } : { status: 'recorded', item: storedItem(held.item) }
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

  /** Records the item the claim's request made under its key, for the time to live, in the room its claim reserved. */
  record (claim: IdempotencyClaim, item: Item): void {
    this.#forget(entryKey(claim), claim.userId)
    const until = Date.now() + this.#bounds.ttlMs
    this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: undefined, item: Object.freeze({ ...item }), until, characters: claim.characters })
  }

  // The user's own oldest keys make room for their new one; the store's bounds refuse it.
  #makeRoom (claim: IdempotencyClaim): void {
    for (let own = this.#byUser.get(claim.userId); own !== undefined && (own.keys.size >= this.#bounds.perUser ||
      own.characters + claim.characters > this.#bounds.perUserCharacters); own = this.#byUser.get(claim.userId)) {
      this.#forget(own.keys.values().next().value!, claim.userId)
    }
    if (this.#entries.size >= this.#bounds.total || this.#characters + claim.characters > this.#bounds.characters) {
      throw new StoreFullError(`the store holds ${this.#entries.size} idempotency keys and ${this.#characters} characters of them, as many as it may`)
    }
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
    const own = this.#byUser.get(claim.userId) ?? { keys: new Set<string>(), characters: 0 }
    own.keys.add(key)
    own.characters += held.characters
    this.#byUser.set(claim.userId, own)
  }

  #forgetExpired (now: number): void {
    for (const [key, held] of this.#entries) {
      if (held.until > now) return
      this.#forget(key, held.userId)
    }
  }

  // A key is in the map exactly when it is in its user's set.
  #forget (key: string, userId: string): void {
    const held = this.#entries.get(key)
    if (held === undefined) return
    this.#entries.delete(key)
    this.#characters -= held.characters
    const own = this.#byUser.get(userId)!
    own.keys.delete(key)
    own.characters -= held.characters
    if (own.keys.size === 0) this.#byUser.delete(userId)
  }
}
