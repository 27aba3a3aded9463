import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis, Result } from 'ioredis'
import { randomUuid } from '../../runtime/uuid.js'
import { OutcomeUnknownError, StoreUnavailableError } from '../store.js'
import type { RedisClock } from './clock.js'
import { type Script, unavailable, WRITE_DEADLINE } from './commands.js'

// How long a write's outcome is kept in Redis: past the longest an instance can take to ask for it (its command
// timeout, then OUTCOME_WITHIN_MS), with room for the two clocks to differ.
const OUTCOME_TTL_MS = 30_000
// How long an instance that lost a write's reply waits for Redis, to ask what the write did, before it answers
// that the outcome is unknown.
export const OUTCOME_WITHIN_MS = 5_000
// Between two tries at asking.
const ASK_EVERY_MS = 50

/**
 * A write script whose outcome is known even when its reply is lost: after WRITE_DEADLINE's ARGV[1] (its
 * deadline), ARGV[2] is the key to record its reply under, also taken off ARGV. `definitions` (functions the body
 * calls) may use WRITE_DEADLINE's `now`. The reply is recorded in the same atomic step as the change, so that it is
 * there exactly when the change is.
 */
export function writeScript (definitions: string, body: string): string {
  return `${WRITE_DEADLINE}
local outcomeKey = table.remove(ARGV, 1)
${definitions}
local function write ()
${body}
end
local outcome = write()
redis.call('SET', outcomeKey, cjson.encode({outcome}), 'PX', ${OUTCOME_TTL_MS})
return outcome`
}

export const writeOutcomeScripts = {
  // KEYS: a write's outcome key. {Redis's time (ms), the write's reply as writeScript recorded it, or nil}.
  writeOutcome: {
    numberOfKeys: 1,
    lua: `
local time = redis.call('TIME')
return {tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), redis.call('GET', KEYS[1])}`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    writeOutcome (outcomeKey: string): Result<[number, string | null], Context>
  }
}

// A reply as Redis would have sent it from what cjson recorded: false is nil. (No write replies with an empty table,
// which cjson would record as an object, nor with a number that is not whole.)
function asReply (value: unknown): unknown {
  if (value === false) return null
  return Array.isArray(value) ? value.map(asReply) : value
}

/**
 * Runs write scripts so that a reply lost on the way (a connection cut, a command timed out) is never taken for a
 * write that did not happen: the instance asks Redis, once it answers again, for the reply the script recorded. No
 * record once Redis's clock has passed the write's deadline means the write did not run and never will: a
 * StoreUnavailableError (503, nothing was done). Redis still unreachable after OUTCOME_WITHIN_MS: an
 * OutcomeUnknownError, which the client resolves by retrying with its Idempotency-Key, or by reading.
 */
export class RedisWrites {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #outcomeFamily: string
  readonly #withinMs: number

  constructor (redis: Redis, clock: RedisClock, outcomeFamily: string, withinMs = OUTCOME_WITHIN_MS) {
    this.#redis = redis
    this.#clock = clock
    this.#outcomeFamily = outcomeFamily
    this.#withinMs = withinMs
  }

  /** The reply of the write script that `send` sends with the deadline and outcome key it is given. */
  async run<T> (send: (deadline: number, outcomeKey: string) => Promise<T>): Promise<T> {
    // The client sends nothing while it is not ready: nothing is done.
    if (this.#redis.status !== 'ready') throw new StoreUnavailableError(`Redis: the connection is ${this.#redis.status}; nothing was sent`)
    const deadline = this.#clock.writeDeadline()
    const outcomeKey = this.#outcomeFamily + randomUuid()
    try {
      return await send(deadline, outcomeKey)
    } catch (error) {
      // A reply came: it says what happened (a deadline passed, Redis out of memory, a bug).
      if (error instanceof Error && error.name === 'ReplyError') unavailable(error)
      return await this.#outcome<T>(outcomeKey, deadline, error)
    }
  }

  async #outcome<T> (outcomeKey: string, deadline: number, lost: unknown): Promise<T> {
    const givesUpAt = performance.now() + this.#withinMs
    for (;;) {
      const asked = this.#redis.status === 'ready' ? await this.#redis.writeOutcome(outcomeKey).catch(() => undefined) : undefined
      if (asked !== undefined) {
        const [now, recorded] = asked
        // The reply as it was recorded: typed as the script's by the call that sent it.
        if (recorded !== null) return asReply((JSON.parse(recorded) as unknown[])[0]) as T
        if (now > deadline) throw new StoreUnavailableError(`Redis: ${String(lost)}; the write did not run`, { cause: lost })
      }
      if (performance.now() > givesUpAt) throw new OutcomeUnknownError(`Redis: ${String(lost)}; whether the write ran is unknown`, { cause: lost })
      await sleep(ASK_EVERY_MS)
    }
  }
}
