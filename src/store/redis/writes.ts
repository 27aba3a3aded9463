import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { randomUuid } from '../../runtime/uuid.js'
import { OutcomeUnknownError, StoreUnavailableError } from '../store.js'
import { type RedisClock, timeMs } from './clock.js'
import { writeLimitAt } from './rate-counter.js'
import { type ArgumentPlace, type SandboxGeneration, transaction, unavailable, type WriteDeadline, writeDeadline, writeDeadlineAt } from './commands.js'

// How long a write's outcome is kept in Redis: past the longest an instance can take to ask for it (its command
// timeout, then OUTCOME_WITHIN_MS), with room for the two clocks to differ.
const OUTCOME_TTL_MS = 30_000
// How long an instance that lost a write's reply waits for Redis, to ask what the write did, before it answers
// that the outcome is unknown.
export const OUTCOME_WITHIN_MS = 5_000
// Between two tries at asking.
const ASK_EVERY_MS = 50
// How long a write waits for its replicas: within COMMAND_TIMEOUT_MS, with room for the script before it.
export const REPLICATION_WITHIN_MS = 500
// While writes are refused for want of replicas, how often Redis is asked whether they are back.
export const REPLICAS_PROBED_EVERY_MS = 250

/** What INFO replication says of a primary: its replication stream, how far it is, and how far each online replica has acknowledged it. */
export function replicationOf (info: string): { stream: string, offset: number, replicas: number[] } {
  const field = (name: string): string => String(new RegExp(`^${name}:(\\S*)`, 'm').exec(info)?.[1])
  const replicas = [...info.matchAll(/^slave\d+:.*\bstate=online,.*\boffset=(\d+)/gm)].map(([, offset]) => Number(offset))
  return { stream: field('master_replid'), offset: Number(field('master_repl_offset')), replicas }
}

/** How many replicas a write must reach before it is answered, and who is told how many did. */
export interface Replication {
  readonly replicas: number
  /**
   * Told, after each write, how many replicas had it within REPLICATION_WITHIN_MS (at least `replicas` is enough),
   * and while writes are refused for want of them, how many are in sync.
   */
  readonly acknowledged?: (replicas: number) => void
  /** Told when writes start being refused for want of replicas, and when they are taken again. */
  readonly shortOfReplicas?: (short: boolean) => void
}

/**
 * A write script whose outcome is known even when its reply is lost: after WRITE_DEADLINE's ARGV[1] (its
 * deadline), ARGV[2] is the key to record its reply under, also taken off ARGV. `definitions` (functions the body
 * calls) may use WRITE_DEADLINE's `now`. The reply is recorded in the same atomic step as the change, so that it is
 * there exactly when the change is. A body that changes nothing answers `refuse(reply)`, which records no reply: a
 * flood of refused writes leaves nothing behind it, and a lost reply is answered as a write undone, which it was.
 * A `limited` script takes a WriteLimit's keys and arguments next (writeLimitAt), its body calls `overLimit()` where
 * the write would be counted and answers `refuse(-1)` over it, and it replies {what the body answered, `counted`}
 * (limitedOutcome). `place`: where the body finds its own arguments (ArgumentPlace).
 */
export function writeScript (definitions: string, body: string, { limited = false, place = 'taken off' }: { limited?: boolean, place?: ArgumentPlace } = {}): string {
  return `${writeDeadlineAt(place)}
local outcomeKey = ${place === 'taken off' ? 'table.remove(ARGV, 1)' : 'ARGV[2]'}
local unchanged = false
local function refuse (reply)
  unchanged = true
  return reply
end
${limited ? writeLimitAt(place) : ''}${definitions}
local function write ()
${body}
end
local outcome = ${limited ? '{write(), counted}' : 'write()'}
if unchanged then return outcome end
redis.call('SET', outcomeKey, cjson.encode({outcome}), 'PX', '${OUTCOME_TTL_MS}')
return outcome`
}

// A reply as Redis would have sent it from what cjson recorded: false is nil. (No write replies with an empty table,
// which cjson would record as an object, nor with a number that is not whole.)
function asReply (value: unknown): unknown {
  if (value === false) return null
  return Array.isArray(value) ? value.map(asReply) : value
}

/** How a store's parts send their writes (RedisWrites), with the clock of the store they write. */
export interface StoreWrites {
  run: <T>(send: (deadline: WriteDeadline, outcomeKey: string) => Promise<T>) => Promise<T>
  /** The deadline of a write sent now that records no reply (a rate limit's count). */
  deadline: () => WriteDeadline
}

/**
 * Runs write scripts so that a reply lost on the way (a connection cut, a command timed out) is never taken for a
 * write that did not happen: the instance asks Redis, once it answers again, for the reply the script recorded. No
 * record once Redis's clock has passed the write's deadline means the write did not run and never will: a
 * StoreUnavailableError (503, nothing was done). Redis still unreachable after OUTCOME_WITHIN_MS: an
 * OutcomeUnknownError, which the client resolves by retrying with its Idempotency-Key, or by reading.
 *
 * WAIT holds the connection it is sent on, and every command queued behind it, reads included, until the replicas
 * answer or REPLICATION_WITHIN_MS passes. So once a write has found fewer replicas than asked for, the next are
 * refused before they are sent (StoreUnavailableError: nothing was done), until INFO shows enough replicas in sync.
 */
export class RedisWrites implements StoreWrites {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #outcomeFamily: string
  readonly #withinMs: number
  readonly #replication: Replication
  #shortOfReplicas = false
  // Where the primary's stream was when replicas were first probed for: a replica that has acknowledged it since has
  // every write refused meanwhile and the one that found it missing. (A lag in INFO would call a replica silent for
  // under a second in sync.)
  #catchUpTo: { stream: string, offset: number } | undefined
  #probedAt = -Infinity
  #probing = false
  // The WAIT the writes sent in this turn of the event loop share, until it is sent.
  #nextWait: Promise<number | { failed: unknown }> | undefined

  constructor (redis: Redis, clock: RedisClock, outcomeFamily: string, { withinMs = OUTCOME_WITHIN_MS, replication = { replicas: 0 } }: { withinMs?: number | undefined, replication?: Replication | undefined } = {}) {
    this.#redis = redis
    this.#clock = clock
    this.#outcomeFamily = outcomeFamily
    this.#withinMs = withinMs
    this.#replication = replication
  }

  /**
   * The reply of the write script that `send` sends with the deadline and outcome key it is given, once the
   * replicas asked for have it: a write only the primary has would be lost if a replica took its place.
   * `clockAheadMs`: how far the clock of the store it writes runs ahead of Redis's (a sandbox's, moved on).
   */
  async run<T> (send: (deadline: WriteDeadline, outcomeKey: string) => Promise<T>, clockAheadMs = 0, generation?: SandboxGeneration): Promise<T> {
    this.#admit()
    const deadline = this.#clock.writeDeadline()
    const outcomeKey = this.#outcomeFamily + randomUuid()
    const reply = send(writeDeadline(deadline, clockAheadMs, generation), outcomeKey)
    const replicated = this.#waitForReplicas()
    let outcome: T
    try {
      outcome = await reply
    } catch (error) {
      // A reply came: it says what happened (a deadline passed, Redis out of memory, a bug).
      if (error instanceof Error && error.name === 'ReplyError') unavailable(error)
      outcome = await this.#outcome<T>(outcomeKey, deadline, error)
      // Found on a connection made again, whose WAIT counts only its own writes: this touch is one, and it follows
      // the write on the primary's replication stream.
      await this.#redis.pexpire(outcomeKey, OUTCOME_TTL_MS).catch(() => {})
      await this.#replicated(this.#waitForReplicas())
      return outcome
    }
    await this.#replicated(replicated)
    return outcome
  }

  deadline (): WriteDeadline {
    return writeDeadline(this.#clock.writeDeadline(), 0)
  }

  /**
   * The writes of a sandbox's generation, whose clock runs `clockAheadMs()` ahead of Redis's, on this one's connection
   * and replicas: each changes nothing once the generation has ended.
   */
  ofSandbox (generation: SandboxGeneration, clockAheadMs: () => number): StoreWrites {
    return {
      run: async (send) => await this.run(send, clockAheadMs(), generation),
      deadline: () => writeDeadline(this.#clock.writeDeadline(), clockAheadMs(), generation)
    }
  }

  // Throws, with nothing sent, what the write would meet: a client that sends nothing while it is not ready, or too
  // few replicas to wait for.
  #admit (): void {
    if (this.#redis.status !== 'ready') throw new StoreUnavailableError(`Redis: the connection is ${this.#redis.status}; nothing was sent`)
    if (this.#shortOfReplicas) {
      this.#probeReplicas()
      throw new StoreUnavailableError(`Redis: fewer than the ${this.#replication.replicas} replicas asked for are in sync; nothing was sent`)
    }
  }

  // One WAIT for every write sent in this turn of the event loop, behind them on the same connection: WAIT counts
  // the replicas that have every write the connection sent before it, and Redis holds the connection until they
  // answer, so a WAIT a write would serialize the writes. Settles at once to what WAIT said or why it failed: it may
  // fail while a script's reply is awaited.
  #waitForReplicas (): Promise<number | { failed: unknown }> | undefined {
    if (this.#replication.replicas === 0) return undefined
    this.#nextWait ??= new Promise((resolve) => {
      setImmediate(() => {
        this.#nextWait = undefined
        this.#redis.wait(this.#replication.replicas, REPLICATION_WITHIN_MS).then(resolve, (error: unknown) => { resolve({ failed: error }) })
      })
    })
    return this.#nextWait
  }

  async #replicated (waiting: Promise<number | { failed: unknown }> | undefined): Promise<void> {
    if (waiting === undefined) return
    const { replicas, acknowledged } = this.#replication
    const reached = await waiting
    if (typeof reached !== 'number') {
      throw new OutcomeUnknownError(`Redis: ${String(reached.failed)}; the write was done, and whether its replicas have it is unknown`, { cause: reached.failed })
    }
    acknowledged?.(reached)
    if (reached < replicas) {
      this.#short(true)
      throw new OutcomeUnknownError(`Redis: the write was done, and ${reached} of the ${replicas} replicas asked for had it within ${REPLICATION_WITHIN_MS} ms: a failover may lose it`)
    }
  }

  // Writes in flight together may each find too few replicas: each says so.
  #short (short: boolean): void {
    this.#shortOfReplicas = short
    this.#catchUpTo = undefined
    this.#replication.shortOfReplicas?.(short)
  }

  // One INFO at a time, at most every REPLICAS_PROBED_EVERY_MS, started by the writes it refuses: nothing to stop.
  #probeReplicas (): void {
    if (this.#probing || performance.now() - this.#probedAt < REPLICAS_PROBED_EVERY_MS) return
    this.#probing = true
    this.#probedAt = performance.now()
    this.#redis.info('replication').then((info) => {
      const { stream, offset, replicas } = replicationOf(info)
      // Another stream is another primary (a failover): its offsets are its own.
      if (this.#catchUpTo?.stream !== stream) this.#catchUpTo = { stream, offset }
      const mark = this.#catchUpTo.offset
      const caughtUp = replicas.filter((acknowledged) => acknowledged >= mark).length
      this.#replication.acknowledged?.(caughtUp)
      if (caughtUp >= this.#replication.replicas) this.#short(false)
    }, () => {}).finally(() => { this.#probing = false })
  }

  async #outcome<T> (outcomeKey: string, deadline: number, lost: unknown): Promise<T> {
    const givesUpAt = performance.now() + this.#withinMs
    for (;;) {
      // Redis's time and the write's recorded reply (writeScript), at one moment.
      const asked = this.#redis.status === 'ready' ? await transaction(this.#redis.multi().time().get(outcomeKey)).catch(() => undefined) : undefined
      if (asked !== undefined) {
        const [time, recorded] = asked as [[string, string], string | null]
        const now = Math.floor(timeMs(time))
        // The reply as it was recorded: typed as the script's by the call that sent it.
        if (recorded !== null) return asReply((JSON.parse(recorded) as unknown[])[0]) as T
        if (now > deadline) throw new StoreUnavailableError(`Redis: ${String(lost)}; the write did not run`, { cause: lost })
      }
      if (performance.now() > givesUpAt) throw new OutcomeUnknownError(`Redis: ${String(lost)}; whether the write ran is unknown`, { cause: lost })
      await sleep(ASK_EVERY_MS)
    }
  }
}
