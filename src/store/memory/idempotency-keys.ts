import type { IdempotencyKeyBounds } from '../../domain/bounds.js'
import type { Item } from '../../domain/index.js'
import { recordBytes } from '../../domain/items.js'
import { recordsForgotten } from '../../domain/quotas.js'
import { storedItem, type StoredItem } from '../../domain/serialized.js'
import { type ClaimOutcome, type HeldKey, type IdempotencyClaim, type IdempotencyKeyStore, QuotaExceededError, type WriteLimit } from '../store.js'
import type { MemoryQuotas } from './quotas.js'
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
  /** What it counts against its user's quota: a record, its item's text; a claim, nothing. */
  readonly bytes: number
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
 * front go with the next claim or sweep (any other when it is next looked up). A record counts its item's text
 * against its user's quota until it is forgotten: past the user's count of keys their oldest goes, and so do their
 * oldest records when a write would pass their quota (`makeRoom`, src/domain/quotas.ts). No other user's record is
 * ever forgotten before its time to live.
 */
export class MemoryIdempotencyKeys implements IdempotencyKeyStore {
  readonly #bounds: IdempotencyKeyBounds
  readonly #entries = new Map<string, Held>()
  // Each user's keys, in the order they were claimed or recorded: the first is the oldest.
  readonly #byUser = new Map<string, Set<string>>()
  readonly #quotas: MemoryQuotas
  readonly #rateCounter: (name: string) => MemoryRateCounter
  readonly #now: () => number

  constructor (bounds: IdempotencyKeyBounds, quotas: MemoryQuotas, rateCounter: (name: string) => MemoryRateCounter, now: () => number) {
    this.#bounds = bounds
    this.#quotas = quotas
    this.#rateCounter = rateCounter
    this.#now = now
  }

  async claim (claim: IdempotencyClaim, leaseMs: number, limit?: WriteLimit): Promise<ClaimOutcome> {
    const now = this.#now()
    this.#forgetExpired(now, Infinity)
    const held = this.#held(entryKey(claim), now)
    if (held === undefined) {
      countWrite(this.#rateCounter, limit)
      for (let own = this.#byUser.get(claim.userId); own !== undefined && own.size >= this.#bounds.perUser; own = this.#byUser.get(claim.userId)) {
        this.#forget(own.values().next().value!, claim.userId)
      }
      this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: claim.token, item: undefined, until: now + leaseMs, bytes: 0 })
      return { status: 'claimed' }
    }
    return heldKey(held, claim)
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    const key = entryKey(claim)
    if (this.#entries.get(key)?.token === claim.token) this.#forget(key, claim.userId)
  }

  /** Whether the claim holds its key, or nothing does (its lease ended, and no other request took it). */
  holds (claim: IdempotencyClaim): boolean {
    const held = this.#held(entryKey(claim), this.#now())
    return held === undefined || held.token === claim.token
  }

  /**
   * Records the item the claim's request made under its key, for the time to live: its bytes (recordBytes) counted
   * against its user's quota by the write that made it, and given back when it is forgotten.
   */
  record (claim: IdempotencyClaim, item: StoredItem): void {
    const key = entryKey(claim)
    this.#forget(key, claim.userId)
    const until = this.#now() + this.#bounds.ttlMs
    this.#hold(claim, { userId: claim.userId, fingerprint: claim.fingerprint, token: undefined, item: Object.freeze({ ...item }), until, bytes: recordBytes(item) })
  }

  /**
   * Makes room in the user's quota for `bytes` more: forgets as few of their own oldest records as it takes (never a
   * claim whose request still runs, nor the key of `keeping`). All or nothing: when even every record gone would not
   * make room, a QuotaExceededError, and nothing is forgotten.
   */
  makeRoom (userId: string, bytes: number, keeping?: IdempotencyClaim): void {
    const kept = keeping === undefined ? undefined : entryKey(keeping)
    const forgotten = recordsForgotten(this.#records(userId, kept), this.#quotas.heldBy(userId), bytes, this.#quotas.bounds.quotaBytes)
    if (forgotten === undefined) throw new QuotaExceededError(this.#quotas.bounds.quotaBytes)
    for (const { key } of forgotten) this.#forget(key, userId)
  }

  // The user's records, oldest first, but the key `kept`: those whose request ended.
  * #records (userId: string, kept: string | undefined): Generator<{ key: string, bytes: number }> {
    for (const key of this.#byUser.get(userId) ?? []) {
      const held = this.#entries.get(key)!
      if (key !== kept && held.item !== undefined) yield { key, bytes: held.bytes }
    }
  }

  /** Forgets every key of the user, claims and records. */
  forgetAll (userId: string): void {
    for (const key of this.#byUser.get(userId) ?? []) this.#forget(key, userId)
  }

  async sweep (now: number, limit: number): Promise<number> {
    return this.#forgetExpired(now, limit)
  }

  // Forgets keys past their time: at most `limit`, the oldest first; how many.
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

  // Its bytes are counted already.
  #hold (claim: IdempotencyClaim, held: Held): void {
    const key = entryKey(claim)
    this.#entries.set(key, held)
    const own = this.#byUser.get(claim.userId) ?? new Set<string>()
    this.#byUser.set(claim.userId, own.add(key))
  }

  // A key is in the map exactly when it is in its user's set. Its bytes go back to its user's quota.
  #forget (key: string, userId: string): void {
    const held = this.#entries.get(key)
    if (held === undefined) return
    this.#entries.delete(key)
    this.#quotas.refund(userId, held.bytes)
    const own = this.#byUser.get(userId)!
    own.delete(key)
    if (own.size === 0) this.#byUser.delete(userId)
  }
}
