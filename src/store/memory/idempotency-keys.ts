import type { IdempotencyKeyBounds } from '../../domain/bounds.js'
import type { Item } from '../../domain/index.js'
import { type CreateRecord, recordBytes } from '../../domain/items.js'
import { recordsForgotten } from '../../domain/quotas.js'
import { storedItem, type StoredItem } from '../../domain/serialized.js'
import { type IdempotencyKey, type IdempotencyKeyStore, QuotaExceededError } from '../store.js'
import type { MemoryQuotas } from './quotas.js'

interface Held {
  readonly userId: string
  readonly fingerprint: string
  /**
   * The recorded item's fields, without its text (made again for a replay), so that an item edited or removed since
   * leaves no text behind.
   */
  readonly item: Item
  /** Milliseconds since the epoch: the end of its time to live. */
  readonly until: number
  /** What it counts against its user's quota: its item's text. */
  readonly bytes: number
}

// One entry per user and key: the user id is a UUID, so it never contains the separator.
const entryKey = ({ userId, key }: IdempotencyKey): string => `${userId} ${key}`

/**
 * The idempotency keys of one process. Every key is one entry of one map, in the order it was recorded,
 * and one of its user's set, in the same order: so a user's oldest goes first in O(1), and expired entries at the
 * front go with the next record or sweep (any other when it is next looked up). A record counts its item's text
 * against its user's quota until it is forgotten: past the user's count of keys their oldest goes, and so do their
 * oldest records when a write would pass their quota (`makeRoom`, src/domain/quotas.ts). No other user's record is
 * ever forgotten before its time to live.
 */
export class MemoryIdempotencyKeys implements IdempotencyKeyStore {
  readonly #bounds: IdempotencyKeyBounds
  readonly #entries = new Map<string, Held>()
  // Each user's keys, in the order they were recorded: the first is the oldest.
  readonly #byUser = new Map<string, Set<string>>()
  readonly #quotas: MemoryQuotas
  readonly #now: () => number

  constructor (bounds: IdempotencyKeyBounds, quotas: MemoryQuotas, now: () => number) {
    this.#bounds = bounds
    this.#quotas = quotas
    this.#now = now
  }

  /** The create recorded under the key, while it is remembered. */
  recorded (key: IdempotencyKey): CreateRecord | undefined {
    const held = this.#held(entryKey(key), this.#now())
    return held === undefined ? undefined : { fingerprint: held.fingerprint, item: storedItem(held.item) }
  }

  /**
   * Records the item a create made under its key, for the time to live, past the user's count of keys forgetting
   * their oldest: its bytes (recordBytes) counted against its user's quota by the write that made it, and given back
   * when it is forgotten.
   */
  record (key: IdempotencyKey, item: StoredItem): void {
    const now = this.#now()
    this.#forgetExpired(now, Infinity)
    for (let own = this.#byUser.get(key.userId); own !== undefined && own.size >= this.#bounds.perUser; own = this.#byUser.get(key.userId)) {
      this.#forget(own.values().next().value!, key.userId)
    }
    const name = entryKey(key)
    this.#entries.set(name, { userId: key.userId, fingerprint: key.fingerprint, item: Object.freeze({ ...item }), until: now + this.#bounds.ttlMs, bytes: recordBytes(item) })
    const own = this.#byUser.get(key.userId) ?? new Set<string>()
    this.#byUser.set(key.userId, own.add(name))
  }

  /**
   * Makes room in the user's quota for `bytes` more: forgets as few of their own oldest records as it takes. All or
   * nothing: when even every record gone would not make room, a QuotaExceededError, and nothing is forgotten.
   */
  makeRoom (userId: string, bytes: number): void {
    const forgotten = recordsForgotten(this.#records(userId), this.#quotas.heldBy(userId), bytes, this.#quotas.bounds.quotaBytes)
    if (forgotten === undefined) throw new QuotaExceededError(this.#quotas.bounds.quotaBytes)
    for (const { key } of forgotten) this.#forget(key, userId)
  }

  // The user's records, oldest first.
  * #records (userId: string): Generator<{ key: string, bytes: number }> {
    for (const key of this.#byUser.get(userId) ?? []) yield { key, bytes: this.#entries.get(key)!.bytes }
  }

  /** Forgets every key of the user. */
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

  // A key is in the map exactly when it is in its user's set; `key` is one of them. Its bytes go back to its user's quota.
  #forget (key: string, userId: string): void {
    const held = this.#entries.get(key)!
    this.#entries.delete(key)
    this.#quotas.refund(userId, held.bytes)
    const own = this.#byUser.get(userId)!
    own.delete(key)
    if (own.size === 0) this.#byUser.delete(userId)
  }
}
