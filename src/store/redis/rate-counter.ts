import type { Redis, Result } from 'ioredis'
import type { Counted, RateCounter } from '../store.js'
import type { RedisClock } from './clock.js'
import { call, type Script, WRITE_DEADLINE } from './commands.js'

export const rateCounterScripts = {
  // KEYS: the counter. ARGV: window (ms). {count, ms until the window ends}.
  countHit: {
    numberOfKeys: 1,
    lua: `${WRITE_DEADLINE}
local current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {current, redis.call('PTTL', KEYS[1])}`
  },
  // KEYS: the counter. {count, ms until the window ends}, or nil when the window has no hit.
  peekHits: {
    numberOfKeys: 1,
    lua: `
local current = redis.call('GET', KEYS[1])
if not current then return false end
return {tonumber(current), redis.call('PTTL', KEYS[1])}`
  },
  // KEYS: the counter. One hit less, unless its window has ended (the key is gone) or it counts none.
  refundHit: {
    numberOfKeys: 1,
    lua: `
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    countHit (counter: string, deadline: number, windowMs: number): Result<[number, number], Context>
    peekHits (counter: string): Result<[number, number] | null, Context>
    refundHit (counter: string): Result<1, Context>
  }
}

/** One rate limit's counters, fixed windows shared by every instance: `prefix` is the limit's (keys.ts, rateLimit). */
export class RedisRateCounter implements RateCounter {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #prefix: string

  constructor (redis: Redis, clock: RedisClock, prefix: string) {
    this.#redis = redis
    this.#clock = clock
    this.#prefix = prefix
  }

  incr (key: string, windowMs: number, _max: number, callback: (outcome: Counted | Error) => void): void {
    this.#count(key, windowMs).then(callback, callback)
  }

  peek (key: string, _windowMs: number, callback: (outcome: Counted | undefined | Error) => void): void {
    call(this.#redis.peekHits(this.#prefix + key)).then((hits) => {
      callback(hits === null ? undefined : { current: hits[0], ttl: hits[1] })
    }, callback)
  }

  async refund (key: string): Promise<void> {
    await call(this.#redis.refundHit(this.#prefix + key))
  }

  async reset (key: string): Promise<void> {
    await call(this.#redis.del(this.#prefix + key))
  }

  async #count (key: string, windowMs: number): Promise<Counted> {
    const [current, ttl] = await call(this.#redis.countHit(this.#prefix + key, this.#clock.writeDeadline(), windowMs))
    return { current, ttl }
  }
}
