import { FifoMap } from 'toad-cache'
import type { Counted, RateCounter, WriteLimit } from '../store.js'

interface Counter {
  current: number
  /** When the counter's window began, in milliseconds since the epoch. */
  readonly startedAt: number
}

/**
 * One rate limit's counters in this process: at most `capacity` keys, each counting requests in a fixed window,
 * as @fastify/rate-limit's own store does. Its store is one least-recently-used map, so a flood of new keys
 * (addresses, emails) pushes out the key of a locked account, and guessing resumes. Here a key over its limit
 * moves to a map of its own, which new keys cannot push anything out of: it stays until its window ends. Only
 * while `capacity` keys are locked at once does a further key go on counting among the evictable ones.
 *
 * The evictable keys leave in the order their windows began, which, all windows of a limit being one length, is
 * the order they end in: the first to go is the one with the least left to count. A key moves only when a window
 * begins, not on every count as in a least-recently-used map, which would take it out and put it back on every
 * write (docs/performance.md). The evictable keys are a toad-cache FIFO; the locked ones are hand-kept, since no
 * cache library keeps an entry pinned until a time and refuses newcomers while all are pinned.
 */
export class MemoryRateCounter implements RateCounter {
  readonly #capacity: number
  // Under their limit, the earliest window first.
  readonly #open: FifoMap<Counter>
  // Over their limit, in the order they were locked.
  readonly #locked = new Map<string, Counter>()
  readonly #now: () => number

  constructor (capacity: number, now: () => number = Date.now) {
    this.#capacity = capacity
    this.#now = now
    this.#open = new FifoMap(capacity)
  }

  /** Counts a request of `key`; answers at once, never with an error. */
  incr (key: string, windowMs: number, max: number, callback: (counted: Counted) => void): void {
    callback(this.count(key, windowMs, max))
  }

  /** Counts a request of `key`, and answers what its window has counted. */
  count (key: string, windowMs: number, max: number): Counted {
    const now = this.#now()
    const existing = this.#locked.get(key) ?? this.#open.get(key)
    const counter = existing !== undefined && existing.startedAt + windowMs > now ? existing : { current: 0, startedAt: now }
    counter.current += 1
    const locked = counter.current > max && this.#lock(key, counter, now, windowMs)
    // A new window: the key goes last among the evictable ones (from there, or from a lock that has ended).
    if (!locked && counter !== existing) {
      this.#locked.delete(key)
      this.#open.delete(key)
      this.#open.set(key, counter)
    }
    return { current: counter.current, ttl: counter.startedAt + windowMs - now }
  }

  peek (key: string, windowMs: number, callback: (counted: Counted | undefined) => void): void {
    const counter = this.#locked.get(key) ?? this.#open.get(key)
    const ttl = counter === undefined ? 0 : counter.startedAt + windowMs - this.#now()
    callback(counter === undefined || ttl <= 0 ? undefined : { current: counter.current, ttl })
  }

  async refund (key: string): Promise<void> {
    const counter = this.#locked.get(key) ?? this.#open.get(key)
    if (counter !== undefined && counter.current > 0) counter.current -= 1
  }

  async reset (key: string): Promise<void> {
    this.#locked.delete(key)
    this.#open.delete(key)
  }

  /** Moves the key to the locked ones; false when as many as the counter keeps are locked and none has ended. */
  #lock (key: string, counter: Counter, now: number, windowMs: number): boolean {
    if (!this.#locked.has(key)) {
      // Locks that have ended leave from the oldest on, each once: no sweep ever walks the whole map.
      for (const [lockedKey, locked] of this.#locked) {
        if (locked.startedAt + windowMs > now) break
        this.#locked.delete(lockedKey)
      }
      if (this.#locked.size >= this.#capacity) return false
    }
    this.#open.delete(key)
    this.#locked.set(key, counter)
    return true
  }
}

/**
 * Counts a write against its limit (none when undefined) in the write's own step, the memory counter answering at
 * once: throws the limit's refusal over it.
 */
export function countWrite (rateCounter: (name: string) => MemoryRateCounter, limit: WriteLimit | undefined): void {
  if (limit === undefined) return
  const counted = rateCounter(limit.name).count(limit.key, limit.windowMs, limit.max)
  limit.counted(counted)
  if (counted.current > limit.max) throw limit.refusal(counted)
}
