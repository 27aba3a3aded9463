import type { FastifyRateLimitStore } from '@fastify/rate-limit'

export interface Counted {
  /** Requests counted in the key's window so far, this one included. */
  readonly current: number
  /** Milliseconds until the window ends. */
  readonly ttl: number
}

interface Counter {
  current: number
  /** When the counter's window began, in milliseconds since the epoch. */
  readonly startedAt: number
}

/**
 * The rate limiter's counters in this process, for @fastify/rate-limit's `store` option: a separate set of
 * `capacity` keys per limit, each counting requests in a fixed window, as the plugin's own store does. Its
 * store is one least-recently-used map, so a flood of new keys (addresses, emails) pushes out the key of a
 * locked account, and guessing resumes. Here a key over its limit moves to a map of its own, which new keys
 * cannot push anything out of: it stays until its window ends. Only while `capacity` keys of one limit are
 * locked at once does a further key go on counting among the evictable ones.
 */
export function lockingRateLimitStore (capacity: number) {
  return class LockingRateLimitStore implements FastifyRateLimitStore {
    // Under their limit, least recently counted first.
    readonly #open = new Map<string, Counter>()
    // Over their limit, in the order they were locked.
    readonly #locked = new Map<string, Counter>()

    /** Counts a request of `key`; answers at once, never with an error. */
    incr (key: string, callback: (error: null, counted: Counted) => void, timeWindow: number, max: number): void {
      const now = Date.now()
      const existing = this.#locked.get(key) ?? this.#open.get(key)
      const counter = existing !== undefined && existing.startedAt + timeWindow > now ? existing : { current: 0, startedAt: now }
      counter.current += 1
      if (counter.current <= max || !this.#lock(key, counter, now, timeWindow)) {
        this.#locked.delete(key)
        this.#open.delete(key)
        this.#open.set(key, counter)
        // One key in at most, so one out is enough; no iterator is made while there is room.
        if (this.#open.size > capacity) this.#open.delete(this.#open.keys().next().value!)
      }
      callback(null, { current: counter.current, ttl: counter.startedAt + timeWindow - now })
    }

    /** Moves the key to the locked ones; false when as many as the store keeps are locked and none has ended. */
    #lock (key: string, counter: Counter, now: number, timeWindow: number): boolean {
      if (!this.#locked.has(key)) {
        // Locks that have ended leave from the oldest on, each once: no sweep ever walks the whole map.
        for (const [lockedKey, locked] of this.#locked) {
          if (locked.startedAt + timeWindow > now) break
          this.#locked.delete(lockedKey)
        }
        if (this.#locked.size >= capacity) return false
      }
      this.#open.delete(key)
      this.#locked.set(key, counter)
      return true
    }

    child (): FastifyRateLimitStore {
      return new LockingRateLimitStore()
    }
  }
}
