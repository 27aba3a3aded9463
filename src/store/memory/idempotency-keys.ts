import type { Item } from '../../domain/index.js'
import { storedItem } from '../../domain/serialized.js'
import { recordsPushedOut } from '../capacity.js'
import { EXPIRED_CHARGES_PER_WRITE } from '../rules.js'
import { ClaimLostError, type ClaimOutcome, type HeldKey, type IdempotencyClaim, type IdempotencyKeyStore, type WriteLimit } from '../store.js'
import { keyBytes, type MemoryCapacity } from './capacity.js'
import { countWrite, type MemoryRateCounter } from './rate-counter.js'

interface Held {
  readonly userId: string
  readonly fingerprint: string
  /** The claiming request's token while it runs; undefined once its item is recorded. */
  readonly token: string | undefined
  /**
   * The recorded item's fields, without its text (made again for a replay), so that an item edited or removed since
   * leaves no text behind.
   */
  readonly item: Item | undefined
  /** Milliseconds since the epoch: the end of a claim's lease, or of a record's time to live. */
  readonly until: number
  /** What it is charged to its user (keyBytes). */
  readonly bytes: number
}

export interface MemoryIdempotencyKeyBounds {
  /** How long a recorded create is remembered. */
  ttlMs: number
  /** Keys one user holds at most; one more pushes out their oldest. */
  perUser: number
}

function heldKey (held: Held, claim: IdempotencyClaim): HeldKey {
  if (held.fingerprint !== claim.fingerprint) return { status: 'mismatch' }
  return held.item === undefined ? { status: 'running' } : { status: 'recorded', item: storedItem(held.item) }
}

// One entry per user and key: the user id is a UUID, so it never contains the separator.
const entryKey = ({ userId, key }: IdempotencyClaim): string => `${userId} ${key}`

/**
 * The idempotency keys of one process. Every key is one entry of one map, in the order it was claimed or recorded,
 * and one of its user's set, in the same order: so a user's oldest goes first in O(1), and expired entries at the
 * front go with the next claim, sweep or write short of room (any other when it is next looked up). Each key is
 * charged to its user, a claim when it is made (never refused: MemoryCapacity.hold) and a record with its item's
 * fields, until it is forgotten: past the user's count its oldest key goes; and whatever the user's room
 * (src/store/capacity.ts) cannot take (an item and its record, an edit) first pushes out the user's own oldest
 * records, all that it needs or none (`makeRoom`). No other user's record is ever forgotten before its time to live.
 */
export class MemoryIdempotencyKeys implements IdempotencyKeyStore {
  readonly #bounds: MemoryIdempotencyKeyBounds
  readonly #entries = new Map<string, Held>()
  // Each user's keys, in the order they were claimed or recorded: the first is the oldest.
  readonly #byUser = new Map<string, Set<string>>()
  readonly #capacity: MemoryCapacity
  readonly #rateCounter: (name: string) => MemoryRateCounter
  readonly #now: () => number

  constructor (bounds: MemoryIdempotencyKeyBounds, capacity: MemoryCapacity, rateCounter: (name: string) => MemoryRateCounter, now: () => number) {
    this.#bounds = bounds
    this.#capacity = capacity
    this.#rateCounter = rateCounter
    this.#now = now
  }

  async claim (claim: IdempotencyClaim, leaseMs: number, limit?: WriteLimit): Promise<ClaimOutcome> {
    const now = this.#now()
    this.#forgetExpired(now, Infinity)
    const held = this.#held(entryKey(claim), now)
    if (held === undefined) {
      countWrite(this.#rateCounter, limit)
      const bytes = keyBytes(entryKey(claim))
      for (let own = this.#byUser.get(claim.userId); own !== undefined && own.size >= this.#bounds.perUser; own = this.#byUser.get(claim.userId)) {
        this.#forget(own.values().next().value!, claim.userId)
      }
      this.#capacity.hold(claim.userId, bytes)
      this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: claim.token, item: undefined, until: now + leaseMs, bytes })
      return { status: 'claimed' }
    }
    return heldKey(held, claim)
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    const key = entryKey(claim)
    if (this.#entries.get(key)?.token === claim.token) this.#forget(key, claim.userId)
  }

  /** Throws a ClaimLostError unless the claim holds its key: called before the item is added. */
  assertHeld (claim: IdempotencyClaim): void {
    const held = this.#held(entryKey(claim), this.#now())
    if (held !== undefined && held.token !== claim.token) throw new ClaimLostError(`idempotency key ${claim.key} is held by another request`)
  }

  /** What recording `item` under the claim's key would charge its user beyond what the claim is charged. */
  recordBytes (claim: IdempotencyClaim, item: Item): number {
    const key = entryKey(claim)
    return keyBytes(key, item) - (this.#entries.get(key)?.bytes ?? 0)
  }

  /**
   * Records the item the claim's request made under its key, for the time to live, charging its user for the item's
   * fields: a StoreFullError, and nothing changed, when the user's room cannot take them.
   */
  record (claim: IdempotencyClaim, item: Item): void {
    const key = entryKey(claim)
    const bytes = keyBytes(key, item)
    // The claim's own bytes, charged when it was made, are part of the record's.
    const claimed = this.#entries.get(key)?.bytes ?? 0
    this.#capacity.charge(claim.userId, bytes - claimed)
    this.#forget(key, claim.userId, false)
    const until = this.#now() + this.#bounds.ttlMs
    this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: undefined, item: Object.freeze({ ...item }), until, bytes })
  }

  /**
   * Makes room for charging the user `bytes`: when their room cannot take it, pushes out their own oldest records
   * (never a claim whose request still runs, nor the key of `keeping`) until it can. All or nothing: when even
   * every record gone would not make room, a StoreFullError, and nothing is pushed out. Keys past their time are
   * forgotten first (EXPIRED_CHARGES_PER_WRITE of them), their charges given back.
   */
  makeRoom (userId: string, bytes: number, keeping?: IdempotencyClaim): void {
    let refused = this.#capacity.refusal(userId, bytes)
    if (refused === undefined) return
    if (this.#forgetExpired(this.#now(), EXPIRED_CHARGES_PER_WRITE) > 0) {
      refused = this.#capacity.refusal(userId, bytes)
      if (refused === undefined) return
    }
    const kept = keeping === undefined ? undefined : entryKey(keeping)
    const pushedOut = recordsPushedOut(this.#records(userId, kept), (freed) => this.#capacity.refusal(userId, bytes - freed) !== undefined)
    if (pushedOut === undefined) throw refused
    for (const { key } of pushedOut) this.#forget(key, userId)
  }

  // The user's records, oldest first, but the key `kept`: those whose request ended.
  * #records (userId: string, kept: string | undefined): Generator<{ key: string, bytes: number }> {
    for (const key of this.#byUser.get(userId) ?? []) {
      const held = this.#entries.get(key)!
      if (key !== kept && held.item !== undefined) yield { key, bytes: held.bytes }
    }
  }

  /** Forgets every key of the user, claims and records, and gives their charges back. */
  forgetAll (userId: string): void {
    for (const key of this.#byUser.get(userId) ?? []) this.#forget(key, userId)
  }

  async sweep (now: number, limit: number): Promise<number> {
    return this.#forgetExpired(now, limit)
  }

  // Forgets, and gives back the charges of, keys past their time: at most `limit`, the oldest first; how many.
  #forgetExpired (now: number, limit: number): number {
    let swept = 0
    for (const [key, held] of this.#entries) {
      if (held.until > now || swept === limit) break
      this.#forget(key, held.userId)
      swept += 1
    }
    return swept
  }

  #held (key: string, now: number): Held | undefined {
    const held = this.#entries.get(key)
    if (held === undefined || held.until > now) return held
    this.#forget(key, held.userId)
    return undefined
  }

  // Its bytes are charged already.
  #hold (claim: IdempotencyClaim, held: Held): void {
    const key = entryKey(claim)
    this.#entries.set(key, held)
    const own = this.#byUser.get(claim.userId) ?? new Set<string>()
    this.#byUser.set(claim.userId, own.add(key))
  }

  // A key is in the map exactly when it is in its user's set. Its bytes go back to its user, unless they pass to
  // what replaces it.
  #forget (key: string, userId: string, refund = true): void {
    const held = this.#entries.get(key)
    if (held === undefined) return
    this.#entries.delete(key)
    if (refund) this.#capacity.refund(userId, held.bytes)
    const own = this.#byUser.get(userId)!
    own.delete(key)
    if (own.size === 0) this.#byUser.delete(userId)
  }
}
