import type { Redis, Result } from 'ioredis'
import { StoreUnavailableError, type WriteLimit } from '../store.js'
import { NO_BOUNDS } from './capacity.js'
import type { Script } from './commands.js'
import type { RedisKeys } from './keys.js'
import { APPEND_EVENT, type EventArguments } from './outbox.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

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

// In a change's JSON, a value is the index of the ARGV that holds it: cjson decodes no text a user wrote, nor any long one.
type ValueIndex = number

type AccountEntry = [account: string, bytes: number, createdAtMs: number | false, replacing: ValueIndex | false, releasingFloor: boolean, admittingFloor: number | false]

/** What a guard asks of a hash field: only that it is there, whatever it holds. */
export const PRESENT = true

/** What `commit` answers when a guard or a bound refused the change: 0 for stale, unless the guard names another. */
export type Refused = number | string

/** The ledger's keys, as `chargeAccount` takes them (src/store/redis/keys.ts). */
export interface LedgerKeys {
  readonly capacity: string
  readonly accountBytes: string
  readonly accountFloors: string
  readonly capacityCharges: string
}

/** What else an account charge takes into account. */
export interface AccountCharge {
  /** When the item refunded was created: one created before items were charged is counted apart (`uncharged`). */
  readonly createdAtMs?: number
  /** A charge of the account's, by its name in capacityCharges, that this one replaces: its bytes are counted as part of these. */
  readonly replacing?: string
  /**
   * The account's floor given back, after the charge (its removal): what it then holds counts against the shared
   * part, as all an account without a floor holds does (MemoryCapacity.release).
   */
  readonly releasingFloor?: boolean
  /**
   * A floor of these bytes reserved for the account, which has none, before the charge (its registration): `commit`
   * answers 'registration' when the floors kept have no room for it.
   */
  readonly admittingFloor?: number
}

/**
 * One atomic change of Redis's keys, as a rule decided it from what it read: plain commands, and bounded
 * increments (a count, the ledger's charges: src/store/capacity.ts), made only while every field a guard names still
 * holds what was read and every increment stays within its bound. A change decided on a read that another instance's
 * write has since made stale is made by none (`commit` answers 0): the rule reads and decides again (`retried`).
 */
export class Change {
  readonly #keys: string[] = []
  readonly #indexes = new Map<string, number>()
  readonly #values: string[] = []
  readonly #valueIndexes = new Map<string, ValueIndex>()
  readonly #guards: Array<[key: number, field: string | false, value: ValueIndex | false | typeof PRESENT, refused: Refused, orNone?: true]> = []
  readonly #commands: Array<[command: string, key: number, ...Array<ValueIndex | StoreTime | AnswerOf | AfterNow | { score: [key: number, member: ValueIndex] }>]> = []
  readonly #charges: Array<[key: number, account: string, bytes: number, most: number, totals: number]> = []
  readonly #counts: Array<[key: number, field: string, by: number, most: number | false, refused: Refused]> = []
  #ledger: [totals: number, bytes: number, floors: number, charges: number, entries: AccountEntry[]] | false = false
  #event: [outbox: number, ...ValueIndex[]] | false = false

  /**
   * Made only while the hash `key` holds `value` in `field` (null: no such field; PRESENT: any); else `commit`
   * answers `refused`.
   */
  guard (key: string, field: string, value: string | null | typeof PRESENT, refused: Refused = 0): this {
    this.#guards.push([this.#index(key), field, typeof value === 'string' ? this.#value(value) : value ?? false, refused])
    return this
  }

  /** Made only while the string `key` holds `value`, or nothing; else `commit` answers `refused`. */
  guardUnlessTaken (key: string, value: string, refused: Refused): this {
    this.#guards.push([this.#index(key), false, this.#value(value), refused, true])
    return this
  }

  /** Runs `command` on `key`, after those written before it. */
  write (command: string, key: string, ...args: Argument[]): this {
    this.#commands.push([command, this.#index(key), ...args.map((arg) => {
      if (typeof arg === 'string') return this.#value(arg)
      return 'key' in arg ? { score: [this.#index(arg.key), this.#value(arg.member)] satisfies [number, number] } : arg
    })])
    return this
  }

  /** What the command written last will answer, as an argument of those written after it. */
  answerOfLast (): AnswerOf {
    return { command: this.#commands.length }
  }

  /**
   * Adds `by` to the count in the hash `key`'s `field`, deleting the field once it comes to 0 or less; made only
   * while it leaves the count at most `most` (when given), else `commit` answers `refused`.
   */
  count (key: string, field: string, by: number, most?: number, refused: Refused = 0): this {
    this.#counts.push([this.#index(key), field, by, most ?? false, refused])
    return this
  }

  /**
   * Adds `bytes` to what the hash `key` charges `account`, and to the ledger's `held` (in the hash `totals`): made
   * only while it leaves the account at most `most`. A refund is given back only as far as the account was charged;
   * what is missing is counted in the ledger's `drift`.
   */
  charge (key: string, account: string, bytes: number, most: number, totals: string): this {
    this.#charges.push([this.#index(key), account, bytes, most, this.#index(totals)])
    return this
  }

  /**
   * Charges `account` `bytes` beside its sessions (a refund when negative) in the ledger of src/store/capacity.ts:
   * `commit` answers 'account' when it would pass the account's ceiling, 'shared' when it would need more of the
   * shared part than is left. A refund past what was charged counts the rest as the ledger's `uncharged` for an
   * item created (`createdAtMs`) before items were charged, else as its `drift`. One charge per account a change.
   */
  chargeAccount (keys: LedgerKeys, account: string, bytes: number, { createdAtMs, replacing, releasingFloor = false, admittingFloor }: AccountCharge = {}): this {
    if (this.#ledger === false) {
      this.#ledger = [this.#index(keys.capacity), this.#index(keys.accountBytes), this.#index(keys.accountFloors), this.#index(keys.capacityCharges), []]
    }
    this.#ledger[4].push([account, bytes, createdAtMs ?? false, replacing === undefined ? false : this.#value(replacing), releasingFloor, admittingFloor ?? false])
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

  /** What `commit` takes after the write's deadline, outcome key and limit: the change, and the values it names. */
  get arguments (): [string, ...string[]] {
    return [JSON.stringify([this.#guards, this.#commands, this.#charges, this.#counts, this.#ledger, this.#event]), ...this.#values]
  }

  // The change is ARGV[1]; its values follow it.
  // A value the change names more than once (an item's id, in its lists) is sent once.
  #value (value: string): ValueIndex {
    let index = this.#valueIndexes.get(value)
    if (index === undefined) {
      index = this.#values.push(value) + 1
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
 * (a refusal for room comes after the count), and passed to none after, so that a write tried again is one hit.
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
  // change (Change.arguments), then the values it names, each by its index in ARGV. The change: its guards, each a
  // key's index, a hash's field (false: the key is a string), the value it must hold (false: none; true: any), what
  // to answer when it does not, and true when holding none will do too; its commands, each a name, its key's index
  // and its arguments, a time by the store's clock written {at = ms}, one from the commit's time {after = ms}, what
  // an earlier command answered {command = its place}; its session charges, each a key's index, an account, bytes,
  // the most the account may then be charged, and the index of the ledger's totals; its counts, each a key's index,
  // a field, by how much, the most it may then be (false: no bound) and what to answer past it; its account charges
  // (false, or the indexes of the totals, the accounts' bytes and floors and the charges by name, then each account,
  // bytes, the creation of the item refunded, or false or null, the name of a charge it replaces, or false, whether
  // its floor is given back, and the floor it is admitted with, or false); its event (false, or the outbox's index
  // and APPEND_EVENT's event). 1 when made; else what refused it: a guard's or a count's answer, 0 past a session
  // charge's bound, 'account', 'shared' or 'registration' for the ledger.
  commit: {
    lua: writeScript(APPEND_EVENT, `
local change = cjson.decode(ARGV[1])
local guards, commands, charges, counts, ledger, event = change[1], change[2], change[3], change[4], change[5], change[6]
for _, guard in ipairs(guards) do
  local key, field, expected = KEYS[guard[1]], guard[2], guard[3]
  if expected == true then
    if redis.call('HEXISTS', key, field) == 0 then return refuse(guard[4]) end
  else
    local held
    if field then held = redis.call('HGET', key, field) else held = redis.call('GET', key) end
    if held ~= (expected and ARGV[expected]) and not (guard[5] and not held) then return refuse(guard[4]) end
  end
end
local sums = {}
for index, count in ipairs(counts) do
  sums[index] = tonumber(redis.call('HGET', KEYS[count[1]], count[2]) or '0') + count[3]
  if count[4] and count[3] > 0 and sums[index] > count[4] then return refuse(count[5]) end
end
local charged = {}
for index, charge in ipairs(charges) do
  charged[index] = tonumber(redis.call('HGET', KEYS[charge[1]], charge[2]) or '0')
  if charge[3] > 0 and charged[index] + charge[3] > charge[4] then return refuse(0) end
end
if overLimit() then return refuse(-1) end
-- The ledger of src/store/capacity.ts (MemoryCapacity's refusal and hold): what an account holds past the rest of
-- its floor (its floor less its sessions' part) draws on the shared part.
local accounts, shared, ledgerHeld = {}, 0, 0
if ledger then
  local totals = redis.call('HMGET', KEYS[ledger[1]], 'ceiling', 'sharedPart', 'shared', 'sessions', 'chargedSince', 'held')
  if not totals[1] then
    ${NO_BOUNDS}
  end
  shared, ledgerHeld = tonumber(totals[3] or '0'), tonumber(totals[6] or '0')
  for index, entry in ipairs(ledger[5]) do
    local account, bytes = entry[1], entry[2]
    if entry[4] then
      local owner, previous = string.match(redis.call('HGET', KEYS[ledger[4]], ARGV[entry[4]]) or '', '^(%S+) (%d+)')
      if owner == account then bytes = bytes - tonumber(previous) end
    end
    local held = tonumber(redis.call('HGET', KEYS[ledger[2]], account) or '0')
    local floorField = redis.call('HGET', KEYS[ledger[3]], account)
    local floor = tonumber(floorField or '0')
    if entry[6] then
      local floors = redis.call('HMGET', KEYS[ledger[1]], 'floors', 'floorsKept')
      if tonumber(floors[1] or '0') + entry[6] > tonumber(floors[2]) then return refuse('registration') end
      floor = entry[6]
    end
    local missing = 0
    if held + bytes < 0 then
      missing = 0 - (held + bytes)
      bytes = 0 - held
    end
    local besideSessions = math.max(0, floor - tonumber(totals[4]))
    local nextShared = shared + math.max(0, held + bytes - besideSessions) - math.max(0, held - besideSessions)
    if bytes > 0 and held + bytes > tonumber(totals[1]) then return refuse('account') end
    if bytes > 0 and nextShared > shared and nextShared > tonumber(totals[2]) then return refuse('shared') end
    -- A floor given back: what the account held within it now draws on the shared part.
    local releasedFloor = entry[5] and floorField
    if releasedFloor then nextShared = nextShared + math.min(held + bytes, besideSessions) end
    shared = nextShared
    accounts[index] = {account, bytes, held + bytes, releasedFloor and 0 or floor, missing, type(entry[3]) == 'number' and entry[3] < tonumber(totals[5] or '0') and 'uncharged' or 'drift',
      releasedFloor and floor, entry[6]}
  end
end
local answers = {}
for place, command in ipairs(commands) do
  command[2] = KEYS[command[2]]
  for index = 3, #command do
    local argument = command[index]
    if type(argument) ~= 'table' then command[index] = ARGV[argument]
    elseif argument.at then command[index] = argument.at - clockAhead
    elseif argument.after then command[index] = now + argument.after
    elseif argument.command then
      -- A number as a text once: Redis formats a number it is given each time it is given one.
      answers[argument.command] = tostring(answers[argument.command])
      command[index] = answers[argument.command]
    else command[index] = redis.call('ZSCORE', KEYS[argument.score[1]], ARGV[argument.score[2]]) end
  end
  answers[place] = redis.call(unpack(command))
end
for index, count in ipairs(counts) do
  if sums[index] <= 0 then redis.call('HDEL', KEYS[count[1]], count[2]) else redis.call('HSET', KEYS[count[1]], count[2], sums[index]) end
end
-- Before the session charges, which add to the totals' held as it is then.
if ledger then
  local totals, heldInAll = KEYS[ledger[1]], ledgerHeld
  for _, entry in ipairs(accounts) do
    local account, bytes, held, floor, missing, missingAs, releasedFloor, admittedFloor = unpack(entry)
    if missing > 0 then redis.call('HINCRBY', totals, missingAs, missing) end
    if held == 0 and floor == 0 then redis.call('HDEL', KEYS[ledger[2]], account) else redis.call('HSET', KEYS[ledger[2]], account, held) end
    if releasedFloor then
      redis.call('HDEL', KEYS[ledger[3]], account)
      -- 0 - floor, not -floor: Lua writes a negative zero (a floor of 0) as "-0", which HINCRBY refuses.
      redis.call('HINCRBY', totals, 'floors', 0 - releasedFloor)
      redis.call('HINCRBY', totals, 'accounts', -1)
    end
    if admittedFloor then
      redis.call('HSET', KEYS[ledger[3]], account, admittedFloor)
      redis.call('HINCRBY', totals, 'floors', admittedFloor)
      redis.call('HINCRBY', totals, 'accounts', 1)
    end
    heldInAll = heldInAll + bytes
  end
  redis.call('HSET', totals, 'held', heldInAll, 'shared', shared)
end
for index, charge in ipairs(charges) do
  local key, account, bytes, totals = KEYS[charge[1]], charge[2], charge[3], KEYS[charge[5]]
  local held = charged[index]
  if held + bytes < 0 then
    redis.call('HINCRBY', totals, 'drift', -(held + bytes))
    -- Not -held: Lua writes a negative zero as "-0", which HINCRBY refuses.
    bytes = 0 - held
  end
  if held + bytes == 0 then redis.call('HDEL', key, account) else redis.call('HSET', key, account, held + bytes) end
  redis.call('HINCRBY', totals, 'held', bytes)
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
    // Its number of keys, its keys (Change.keys), the deadline, the outcome key, the limit's max and window, then Change.arguments.
    commit (numberOfKeys: number, ...keysAndArguments: Array<string | number>): Result<Limited<Refused>, Context>
  }
}

/**
 * Commits `change` as one write (StoreWrites.run), counted against `limit` when given (its refusal thrown over it):
 * 1 when made, else what refused it (Change.guard; 0 for stale).
 */
export async function commit (redis: Redis, writes: StoreWrites, keys: RedisKeys, change: Change, limit?: WriteLimit): Promise<Refused> {
  const [limitCounter, limitMax, limitWindowMs] = limitArguments(keys, limit)
  return limitedOutcome(await writes.run(async (deadline, outcomeKey) => await redis.commit(...change.keys(limitCounter), deadline, outcomeKey, limitMax, limitWindowMs, ...change.arguments)),
    limit)
}
