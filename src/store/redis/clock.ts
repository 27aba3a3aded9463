import type { Redis } from 'ioredis'
import { COMMAND_TIMEOUT_MS } from './commands.js'

// A write's deadline on Redis comes this long before its command times out here: room for the reply to travel
// and for the error in reckoning Redis's clock (half a round trip), so that a write answered 503 was not applied.
const DEADLINE_MARGIN_MS = 250

/** TIME's reply, in milliseconds since the epoch. */
export const timeMs = ([seconds, microseconds]: ReadonlyArray<string | number>): number =>
  Number(seconds) * 1000 + Number(microseconds) / 1000

/**
 * Redis's clock as this instance reckons it, from TIME, taking the reply to have been made half-way through the
 * round trip: as an offset from this process's wall clock (for `now`) and from its monotonic clock (for deadlines,
 * which must not move when the wall clock is stepped).
 */
export class RedisClock {
  readonly #redis: Redis
  #wallOffsetMs = 0
  #monotonicOffsetMs = 0

  constructor (redis: Redis) {
    this.#redis = redis
  }

  async check (): Promise<void> {
    const [sentAt, sentAtWall] = [performance.now(), Date.now()]
    const redisTime = timeMs(await this.#redis.time())
    this.#monotonicOffsetMs = redisTime - (sentAt + performance.now()) / 2
    this.#wallOffsetMs = Math.round(redisTime - (sentAtWall + Date.now()) / 2)
  }

  now (): number {
    return Date.now() + this.#wallOffsetMs
  }

  /** The time on Redis's clock after which a write sent now must change nothing (see WRITE_DEADLINE). */
  writeDeadline (): number {
    return Math.floor(performance.now() + this.#monotonicOffsetMs) + COMMAND_TIMEOUT_MS - DEADLINE_MARGIN_MS
  }
}
