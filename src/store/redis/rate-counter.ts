import type { Redis, Result } from 'ioredis'
import type { Counted, RateCounter, WriteLimit } from '../store.js'
import { type ArgumentPlace, call, type Script, transaction, WRITE_DEADLINE, type WriteDeadline } from './commands.js'
import type { RedisKeys } from './keys.js'

// Counters under their limit a hit looks through, the oldest first, for those to let go past the limit's number.
const EVICTIONS_SCANNED = 8

// Lua: one hit in the counter `key`, whose window of `windowMs` begins with its first. {hits so far, ms until the
// window ends}.
const COUNT_HIT = `
local function countHit (key, windowMs)
  local hits = redis.call('INCR', key)
  if hits == 1 then redis.call('PEXPIRE', key, windowMs) end
  return {hits, redis.call('PTTL', key)}
end
`

/**
 * Lua for a write script counted against a WriteLimit in its own step (writeScript's `limited`): KEYS[1] is the
 * limit's counter, ARGV[1] and ARGV[2] its max (negative when no limit counts the write) and window (ms), all three
 * taken off (or, in place, KEYS[1], ARGV[3] and ARGV[4], after the deadline and outcome key). `overLimit()` counts
 * the write, and is true when the write is over the limit and must not be done; `counted` is then what it counted,
 * or false.
 */
export const writeLimitAt = (place: ArgumentPlace): string => `${COUNT_HIT}
local limitKey = ${place === 'taken off' ? 'table.remove(KEYS, 1)' : 'KEYS[1]'}
local limitMax = tonumber(${place === 'taken off' ? 'table.remove(ARGV, 1)' : 'ARGV[3]'})
local limitWindowMs = ${place === 'taken off' ? 'table.remove(ARGV, 1)' : 'ARGV[4]'}
local counted = false
local function overLimit ()
  if limitMax < 0 then return false end
  counted = countHit(limitKey, limitWindowMs)
  return counted[1] > limitMax
end
`

/** The counter key and the max and window that a limited write script takes first (writeLimitAt). */
export function limitArguments (keys: RedisKeys, limit: WriteLimit | undefined): [key: string, max: number, windowMs: number] {
  return limit === undefined ? [keys.rateLimit, -1, 0] : [`${keys.rateLimit}${limit.name}:${limit.key}`, limit.max, limit.windowMs]
}

/** A limited write script's reply: what its body answered, and what its limit counted (null when none did). */
export type Limited<Outcome> = [outcome: Outcome, counted: [current: number, ttl: number] | null]

/** What a limited write script did, once its limit is told what it counted; throws the limit's refusal over it. */
export function limitedOutcome<Outcome> ([outcome, counted]: Limited<Outcome>, limit: WriteLimit | undefined): Exclude<Outcome, -1> {
  if (counted !== null && limit !== undefined) {
    const [current, ttl] = counted
    limit.counted({ current, ttl })
    if (current > limit.max) throw limit.refusal({ current, ttl })
  }
  // A script answers -1 only over its limit, whose refusal was thrown.
  return outcome as Exclude<Outcome, -1>
}

export const rateCounterScripts = {
  // KEYS: the counter, the limit's counters (rateLimitKeys). ARGV: window (ms), the counters the limit keeps at most,
  // its max. {count, ms until the window ends}. A counter whose window begins joins the limit's; past their number,
  // the oldest windows under the limit go first (a caller over it stays locked out), and the oldest of all when
  // none is.
  countHit: {
    numberOfKeys: 2,
    lua: `${WRITE_DEADLINE}${COUNT_HIT}
local counted = countHit(KEYS[1], ARGV[1])
if counted[1] > 1 then return counted end
local counters, most, max = KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZADD', counters, now + tonumber(ARGV[1]), KEYS[1])
redis.call('ZREMRANGEBYSCORE', counters, '-inf', now)
local over = redis.call('ZCARD', counters) - most
if over <= 0 then return counted end
for _, oldest in ipairs(redis.call('ZRANGE', counters, 0, over + ${EVICTIONS_SCANNED} - 1)) do
  if over > 0 and tonumber(redis.call('GET', oldest) or '0') <= max then
    redis.call('DEL', oldest)
    redis.call('ZREM', counters, oldest)
    over = over - 1
  end
end
for _, oldest in ipairs(over > 0 and redis.call('ZPOPMIN', counters, over) or {}) do redis.call('DEL', oldest) end
return counted`
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
    countHit (counter: string, counters: string, deadline: WriteDeadline, windowMs: number, most: number, max: number): Result<[number, number], Context>
    refundHit (counter: string): Result<1, Context>
  }
}

/**
 * One rate limit's counters, fixed windows shared by every instance, at most `keysPerLimit` under the limit and as
 * many again over it, as the memory store keeps (those over it kept first): `name` is the limit's (keys.ts, rateLimit
 * and rateLimitKeys).
 */
export class RedisRateCounter implements RateCounter {
  readonly #redis: Redis
  readonly #deadline: () => WriteDeadline
  readonly #prefix: string
  readonly #counters: string
  readonly #most: number

  /** `deadline`: of a count sent now, by the catalogue's writes (StoreWrites.deadline). */
  constructor (redis: Redis, deadline: () => WriteDeadline, keys: RedisKeys, name: string, keysPerLimit: number) {
    this.#redis = redis
    this.#deadline = deadline
    this.#prefix = `${keys.rateLimit}${name}:`
    this.#counters = `${keys.rateLimitKeys}${name}`
    this.#most = 2 * keysPerLimit
  }

  incr (key: string, windowMs: number, max: number, callback: (outcome: Counted | Error) => void): void {
    this.#count(key, windowMs, max).then(callback, callback)
  }

  peek (key: string, _windowMs: number, callback: (outcome: Counted | undefined | Error) => void): void {
    this.#peek(this.#prefix + key).then(callback, callback)
  }

  async refund (key: string): Promise<void> {
    await call(this.#redis.refundHit(this.#prefix + key))
  }

  async reset (key: string): Promise<void> {
    await call(this.#redis.del(this.#prefix + key))
  }

  // A transaction, so that the count and its time to live are of the same window.
  async #peek (counter: string): Promise<Counted | undefined> {
    const [current, ttl] = await transaction(this.#redis.multi().get(counter).pttl(counter))
    return current === null ? undefined : { current: Number(current), ttl: Number(ttl) }
  }

  async #count (key: string, windowMs: number, max: number): Promise<Counted> {
    const [current, ttl] = await call(this.#redis.countHit(this.#prefix + key, this.#counters, this.#deadline(), windowMs, this.#most, max))
    return { current, ttl }
  }
}
