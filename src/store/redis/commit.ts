import type { Redis, Result } from 'ioredis'
import { StoreUnavailableError, type WriteLimit } from '../store.js'
import type { Script } from './commands.js'
import { type ChangeEvent, type ChangeParts, type Command, type CommandArgument, compiledCommit, type Count, evaluate, type Guard, type Held, type Refused, type ValueIndex } from './compiled-commit.js'
import type { RedisKeys } from './keys.js'
import { APPEND_EVENT, type EventArguments } from './outbox.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

export type { Held, Refused } from './compiled-commit.js'

/** A time by the store's clock, which the commit turns into one by Redis's (WRITE_DEADLINE's clockAhead). */
export interface StoreTime {
  readonly at: number
}

export const storeTime = (at: number): StoreTime => ({ at })

/** An argument read when the change is made: the score of `member` in the sorted set `key`. */
export interface ScoreOf {
  readonly key: string
  readonly member: string
}

/** An argument read when the change is made: what the change's command `command` (from 1, in order) answered. */
export interface AnswerOf {
  readonly command: number
}

/** A time by the store's clock, `ms` after the change is made. */
export interface AfterNow {
  readonly after: number
}

export const afterNow = (ms: number): AfterNow => ({ after: ms })

type Argument = string | StoreTime | ScoreOf | AnswerOf | AfterNow

/** What a guard asks of a hash field: only that it is there, whatever it holds. */
export const PRESENT = true

/**
 * One atomic change of Redis's keys, as a rule decided it from what it read: plain commands, and bounded
 * increments (a count, an account's bytes against its quota: src/domain/quotas.ts), made only while every field a
 * guard names still holds what was read and every increment stays within its bound. A change decided on a read that
 * another instance's write has since made stale is made by none (`commit` answers 0): the rule reads and decides
 * again (`retried`).
 */
export class Change {
  readonly #keys: string[] = []
  readonly #indexes = new Map<string, number>()
  readonly #values: string[] = []
  readonly #valueIndexes = new Map<string, ValueIndex>()
  readonly #guards: Guard[] = []
  readonly #commands: Command[] = []
  readonly #counts: Count[] = []
  #event: ChangeEvent = false

  /**
   * Made only while the hash `key` holds `value` in `field` (null: no such field; PRESENT: any); else `commit`
   * answers `refused`.
   */
  guard (key: string, field: string, value: string | null | typeof PRESENT, refused: Refused = 0): this {
    this.#guards.push([this.#index(key), this.#value(field), typeof value === 'string' ? this.#value(value) : value ?? false, refused, false])
    return this
  }

  /**
   * Made only while the hash `key` holds in `field` the `read` a rule decided on; else `commit` answers what it holds
   * (Held), for the rule to decide again on that with no read of its own.
   */
  guardAsRead (key: string, field: string, read: string): this {
    this.#guards.push([this.#index(key), this.#value(field), this.#value(read), 0, true])
    return this
  }

  /** Made only while the string `key` holds nothing; else `commit` answers what it holds (Held). */
  guardVacant (key: string): this {
    this.#guards.push([this.#index(key), false, false, 0, true])
    return this
  }

  /** Runs `command` on `key`, after those written before it. */
  write (command: string, key: string, ...args: Argument[]): this {
    this.#commands.push([command, this.#index(key), ...args.map((arg): CommandArgument => {
      if (typeof arg === 'string') return this.#value(arg)
      if ('key' in arg) return { score: [this.#index(arg.key), this.#value(arg.member)] }
      if ('at' in arg) return { at: this.#value(String(arg.at)) }
      return 'after' in arg ? { after: this.#value(String(arg.after)) } : arg
    })])
    return this
  }

  /** What the command written last will answer, as an argument of those written after it. */
  answerOfLast (): AnswerOf {
    return { command: this.#commands.length }
  }

  /**
   * Adds `by` to the count in the hash `key`'s `field`, deleting the field once it comes to 0 or less; made only
   * while it leaves the count at most `most` (when given), else `commit` answers `refused`: before the write limit
   * counts the change, or, `afterLimit`, once it has (a quota's refusal, which the write limit counts, as the memory
   * store's does).
   */
  count (key: string, field: string, by: number, most?: number, refused: Refused = 0, afterLimit = false): this {
    const bounded = most === undefined || most === Infinity ? false : this.#value(String(most))
    this.#counts.push([this.#index(key), this.#value(field), this.#value(String(by)), bounded, refused, afterLimit, by > 0])
    return this
  }

  /** Appends the event to the stream `outbox` (APPEND_EVENT), when there is one. */
  event (outbox: string, event: EventArguments): this {
    if (event.length > 0) this.#event = [this.#index(outbox), ...event.map((value) => this.#value(value))]
    return this
  }

  /** What `commit` takes before the write's deadline: the number of keys, the write limit's counter, the keys. */
  keys (limitCounter: string): [number, string, ...string[]] {
    return [this.#keys.length + 1, limitCounter, ...this.#keys]
  }

  /** The values the change names, in the order its script takes them. */
  get values (): readonly string[] {
    return this.#values
  }

  /** The change as the decoded commit takes it, before its values: its structure in JSON. */
  get structure (): string {
    return JSON.stringify([this.#guards, this.#commands, this.#counts, this.#event])
  }

  /** What the change makes, in the form its scripts take. */
  get parts (): ChangeParts {
    return { guards: this.#guards, commands: this.#commands, counts: this.#counts, event: this.#event }
  }

  #value (value: string): ValueIndex {
    let index = this.#valueIndexes.get(value)
    if (index === undefined) {
      // A value the change names more than once (an item's id, in its lists) is sent once.
      index = this.#values.push(value)
      this.#valueIndexes.set(value, index)
    }
    return index
  }

  #index (key: string): number {
    let index = this.#indexes.get(key)
    if (index === undefined) {
      index = this.#keys.push(key)
      this.#indexes.set(key, index)
    }
    return index
  }
}

// A change decided on a read tries again when another instance changed what it read in between; past this many
// tries it gives up with a StoreUnavailableError rather than hold the request.
export const MAX_CHANGE_ATTEMPTS = 16

/**
 * The write limit of one write however many times it is tried (`retried`): counted by the first try that reaches it
 * (a refusal for the quota comes after the count), and passed to none after, so that a write tried again is one hit.
 */
export function countedOnce (limit: WriteLimit | undefined): () => WriteLimit | undefined {
  if (limit === undefined) return () => undefined
  let counted = false
  const once: WriteLimit = {
    name: limit.name,
    key: limit.key,
    max: limit.max,
    windowMs: limit.windowMs,
    counted: (hit) => {
      counted = true
      limit.counted(hit)
    },
    refusal: (hit) => limit.refusal(hit)
  }
  return () => counted ? undefined : once
}

/** What an attempt answers when what it read was changed before it could commit: it is tried again. */
export const STALE = Symbol('stale')

/** What `attempt` answers, once it is not STALE; past MAX_CHANGE_ATTEMPTS tries, a StoreUnavailableError. */
export async function retried<T> (what: string, attempt: () => Promise<T | typeof STALE>): Promise<T> {
  for (let attempts = 0; attempts < MAX_CHANGE_ATTEMPTS; attempts += 1) {
    const outcome = await attempt()
    if (outcome !== STALE) return outcome
  }
  throw new StoreUnavailableError(`${what} changed ${MAX_CHANGE_ATTEMPTS} times while being changed`)
}

export const commitScripts = {
  // A limited write script (writeScript) with as many KEYS as its change names after the limit's counter. ARGV: the
  // change's structure (Change.structure), taken off, then the values it names, each by its index in ARGV. The
  // structure: its guards, each a key's index, a hash's field (false: the key is a string), the value it must hold
  // (false: none; true: any), what to answer when it does not, and true when it answers {what it
  // holds} instead (Change.guardAsRead, Change.guardVacant); its commands, each a name, its key's index and its
  // arguments, a time by the store's clock written {at = ms}, one from the commit's time {after = ms}, what an earlier
  // command answered {command = its place}; its counts, each a key's index, a field, by how much, the most it may then
  // be (false: no bound), what to answer past it, whether that is checked once the write limit has counted, and
  // whether it adds; its event (false, or the outbox's index and APPEND_EVENT's event). 1 when made; else what refused
  // it: a guard's or a count's answer. A compiled commit is the same, written out for one shape of change.
  commit: {
    lua: writeScript(APPEND_EVENT, `
local change = cjson.decode(table.remove(ARGV, 1))
local guards, commands, counts, event = change[1], change[2], change[3], change[4]
for _, guard in ipairs(guards) do
  local key, field, expected = KEYS[guard[1]], guard[2] and ARGV[guard[2]], guard[3]
  if expected == true then
    if redis.call('HEXISTS', key, field) == 0 then return refuse(guard[4]) end
  else
    local held
    if field then held = redis.call('HGET', key, field) else held = redis.call('GET', key) end
    if held ~= (expected and ARGV[expected]) then
      if guard[5] then return refuse({held}) end
      return refuse(guard[4])
    end
  end
end
local sums = {}
local function passed (count, sum) return count[4] and count[7] and sum > tonumber(ARGV[count[4]]) end
for index, count in ipairs(counts) do
  sums[index] = tonumber(redis.call('HGET', KEYS[count[1]], ARGV[count[2]]) or '0') + tonumber(ARGV[count[3]])
  if not count[6] and passed(count, sums[index]) then return refuse(count[5]) end
end
if overLimit() then return refuse(-1) end
for index, count in ipairs(counts) do
  if count[6] and passed(count, sums[index]) then return refuse(count[5]) end
end
local answers = {}
for place, command in ipairs(commands) do
  command[2] = KEYS[command[2]]
  for index = 3, #command do
    local argument = command[index]
    if type(argument) ~= 'table' then command[index] = ARGV[argument]
    elseif argument.at then command[index] = tonumber(ARGV[argument.at]) - clockAhead
    elseif argument.after then command[index] = now + tonumber(ARGV[argument.after])
    elseif argument.command then
      -- A number as a text once: Redis formats a number it is given each time it is given one.
      answers[argument.command] = tostring(answers[argument.command])
      command[index] = answers[argument.command]
    else command[index] = redis.call('ZSCORE', KEYS[argument.score[1]], ARGV[argument.score[2]]) end
  end
  answers[place] = redis.call(unpack(command))
end
for index, count in ipairs(counts) do
  if sums[index] <= 0 then redis.call('HDEL', KEYS[count[1]], ARGV[count[2]]) else redis.call('HSET', KEYS[count[1]], ARGV[count[2]], sums[index]) end
end
if event then
  local values = {}
  for index = 2, #event do values[index - 1] = ARGV[event[index]] end
  appendEvent(KEYS[event[1]], values)
end
return 1`, { limited: true })
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    // Its number of keys, its keys (Change.keys), the deadline, the outcome key, the limit's max and window, Change.structure, then Change.values.
    commit (numberOfKeys: number, ...keysAndArguments: Array<string | number>): Result<Limited<Refused | Held>, Context>
  }
}

/**
 * Commits `change` as one write (StoreWrites.run), counted against `limit` when given (its refusal thrown over it):
 * 1 when made, else what refused it (Change.guard; 0 for stale; Held for Change.guardAsRead). A change of a shape
 * compiled before is sent as its own script, with nothing to decode.
 */
export async function commit (redis: Redis, writes: StoreWrites, keys: RedisKeys, change: Change, limit?: WriteLimit): Promise<Refused | Held> {
  const [limitCounter, limitMax, limitWindowMs] = limitArguments(keys, limit)
  const structure = change.structure
  const compiled = compiledCommit(change.parts, structure)
  return limitedOutcome(await writes.run(async (deadline, outcomeKey) => {
    if (compiled === undefined) return await redis.commit(...change.keys(limitCounter), deadline, outcomeKey, limitMax, limitWindowMs, structure, ...change.values)
    const [numberOfKeys, ...keysAndArguments] = [...change.keys(limitCounter), deadline, outcomeKey, limitMax, limitWindowMs, ...change.values]
    return await evaluate(redis, compiled, numberOfKeys, keysAndArguments) as Limited<Refused | Held>
  }), limit)
}
