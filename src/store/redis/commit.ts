import type { Result } from 'ioredis'
import { StoreUnavailableError } from '../store.js'
import type { Script, WriteDeadline } from './commands.js'
import { writeScript } from './writes.js'

/** A time by the store's clock, which the commit turns into one by Redis's (WRITE_DEADLINE's clockAhead). */
export interface StoreTime {
  readonly at: number
}

export const storeTime = (at: number): StoreTime => ({ at })

type Argument = string | StoreTime

/**
 * One atomic change of Redis's keys, as a rule (src/store/sessions.ts) decided it from what it read: plain commands,
 * and charges of the ledger (src/store/capacity.ts), made only while every field a guard names still holds what was
 * read and every charge stays within its bound. A change decided on a read that another instance's write has since
 * made stale is made by none (`commit` answers 0): the rule reads and decides again (`retried`).
 */
export class Change {
  readonly #keys: string[] = []
  readonly #indexes = new Map<string, number>()
  readonly #guards: Array<[key: number, field: string, value: string | false]> = []
  readonly #commands: Array<[command: string, key: number, ...Argument[]]> = []
  readonly #charges: Array<[key: number, account: string, bytes: number, most: number, totals: number]> = []

  /** Made only while the hash `key` holds `value` in `field` (null: no such field). */
  guard (key: string, field: string, value: string | null): this {
    this.#guards.push([this.#index(key), field, value ?? false])
    return this
  }

  /** Runs `command` on `key`, after those written before it. */
  write (command: string, key: string, ...args: Argument[]): this {
    this.#commands.push([command, this.#index(key), ...args])
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

  /** What `commit` takes before the write's deadline: the number of keys, the keys. */
  get keys (): [number, ...string[]] {
    return [this.#keys.length, ...this.#keys]
  }

  /** What `commit` takes after the write's deadline and outcome key. */
  get json (): string {
    return JSON.stringify([this.#guards, this.#commands, this.#charges])
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
  // A write script (writeScript) with as many KEYS as its change names. ARGV: the change (Change.json): its guards,
  // each a key's index, a field and the value it must hold (false: none); its commands, each a name, its key's index
  // and its arguments, a time by the store's clock written {at = ms}; its charges, each a key's index, an account,
  // bytes, the most the account may then be charged, and the index of the ledger's totals. 1 when made, 0 when a
  // guard or a charge's bound refused it.
  commit: {
    lua: writeScript('', `
local change = cjson.decode(ARGV[1])
for _, guard in ipairs(change[1]) do
  if redis.call('HGET', KEYS[guard[1]], guard[2]) ~= guard[3] then return refuse(0) end
end
local charged = {}
for index, charge in ipairs(change[3]) do
  charged[index] = tonumber(redis.call('HGET', KEYS[charge[1]], charge[2]) or '0')
  if charge[3] > 0 and charged[index] + charge[3] > charge[4] then return refuse(0) end
end
for _, command in ipairs(change[2]) do
  command[2] = KEYS[command[2]]
  for index = 3, #command do
    if type(command[index]) == 'table' then command[index] = command[index].at - clockAhead end
  end
  redis.call(unpack(command))
end
for index, charge in ipairs(change[3]) do
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
return 1`)
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    commit (...args: [...keys: [number, ...string[]], deadline: WriteDeadline, outcomeKey: string, change: string]): Result<0 | 1, Context>
  }
}
