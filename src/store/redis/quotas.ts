import type { Redis, Result } from 'ioredis'
import { textBytes } from '../../domain/quotas.js'
import { randomUuid } from '../../runtime/uuid.js'
import type { StoreUsage } from '../store.js'
import { call, type Script } from './commands.js'
import type { Change } from './commit.js'
import type { RedisKeys } from './keys.js'

/**
 * Lua for the scripts that forget recorded idempotency keys (one past its user's count of keys, one past its time):
 * each passes the keys of `recordKeys` from KEYS[index] on and calls `recordsAt(index)` first.
 * `forgetRecord(name)` gives the record's bytes back to its user's quota (src/domain/quotas.ts) and forgets its
 * entries; `forgetExpired(now, limit)` does so for the records Redis has expired, the oldest first: how many.
 */
export const RECORDS = `
local records
local function recordsAt (index)
  records = {bytes = KEYS[index], expiries = KEYS[index + 1], accounts = KEYS[index + 2], totals = KEYS[index + 3]}
end
local function forgetRecord (name)
  local held = redis.call('HGET', records.bytes, name)
  if not held then return end
  local account, bytes = string.match(held, '^(%S+) (%d+)$')
  redis.call('HDEL', records.bytes, name)
  redis.call('ZREM', records.expiries, name)
  if tonumber(redis.call('HINCRBY', records.accounts, account, 0 - tonumber(bytes))) <= 0 then redis.call('HDEL', records.accounts, account) end
  redis.call('HINCRBY', records.totals, 'held', 0 - tonumber(bytes))
end
local function forgetExpired (now, limit)
  local expired = redis.call('ZRANGEBYSCORE', records.expiries, '-inf', now, 'LIMIT', 0, limit)
  for _, name in ipairs(expired) do forgetRecord(name) end
  return #expired
end
`

/** The keys RECORDS's `recordsAt` takes, in order. */
export type RecordKeys = [bytes: string, expiries: string, accounts: string, totals: string]

export const recordKeys = (keys: RedisKeys): RecordKeys => [keys.recordBytes, keys.recordExpiries, keys.accountBytes, keys.capacity]

/** How many keys `recordKeys` gives a script. */
export const RECORD_KEYS: RecordKeys['length'] = 4

export const quotaScripts = {
  // KEYS: the record keys. ARGV: how many at most. Forgets the records Redis has expired: how many.
  forgetExpiredRecords: {
    numberOfKeys: RECORD_KEYS,
    lua: `${RECORDS}
recordsAt(1)
local time = redis.call('TIME')
return forgetExpired(tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), tonumber(ARGV[1]))`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    forgetExpiredRecords (...args: [...RecordKeys, limit: number]): Result<number, Context>
  }
}

/**
 * The id of the data, made by the first start on an empty Redis: one made again means Redis lost the data since an
 * instance last read it (a restart without persistence, a flush).
 */
export async function storeId (redis: Redis, keys: RedisKeys): Promise<string> {
  await call(redis.hsetnx(keys.capacity, 'storeId', randomUuid()))
  return String(await call(redis.hget(keys.capacity, 'storeId')))
}

/** The id `storeId` made, or null once Redis has lost it. */
export async function readStoreId (redis: Redis, keys: RedisKeys): Promise<string | null> {
  return await call(redis.hget(keys.capacity, 'storeId'))
}

export async function readUsage (redis: Redis, keys: RedisKeys): Promise<StoreUsage> {
  const [accounts, held] = await call(redis.hmget(keys.capacity, 'accounts', 'held'))
  return { accounts: Number(accounts ?? 0), heldBytes: Number(held ?? 0) }
}

/** What `commit` answers when an account's bytes would pass its quota. */
export const QUOTA_PASSED = 'quota'

/**
 * Adds to `change` `bytes` more counted against the account's quota (fewer when negative), and in the total: made
 * only while it leaves the account within `quotaBytes`, else `commit` answers QUOTA_PASSED, the write limit counted.
 */
export const countBytes = (change: Change, keys: RedisKeys, accountId: string, bytes: number, quotaBytes: number): Change =>
  bytes === 0 ? change : change.count(keys.accountBytes, accountId, bytes, quotaBytes, QUOTA_PASSED, true).count(keys.capacity, 'held', bytes)

// The fields of `capacity` the capacity ledger kept, its bounds and sums: `floor` is the one each of its starts set.
const LEDGER_FIELDS = ['budget', 'floor', 'sessions', 'ceiling', 'floorsKept', 'sharedPart', 'room', 'chargedSince', 'held', 'floors', 'shared', 'accounts',
  'paceTokens', 'paceAt', 'uncharged', 'drift']
// Entries a call reads of a hash, scanning it.
const SCANNED_PER_CALL = 1000

async function * entriesOf (redis: Redis, hash: string): AsyncGenerator<[field: string, value: string]> {
  let cursor = '0'
  do {
    const [next, fields] = await call(redis.hscan(hash, cursor, 'COUNT', SCANNED_PER_CALL))
    for (let index = 0; index < fields.length; index += 2) yield [fields[index]!, fields[index + 1]!]
    cursor = next
  } while (cursor !== '0')
}

/**
 * Serves data kept with the capacity ledger that came before quotas: counts each account's bytes again from its items
 * and records (src/domain/quotas.ts), and the accounts, and deletes the ledger's keys and fields, in one transaction
 * made only while no other start has done so meanwhile. Whether it found a ledger to replace.
 */
export async function quotasFromLedger (redis: Redis, keys: RedisKeys): Promise<boolean> {
  await call(redis.watch(keys.capacity))
  if (await call(redis.hexists(keys.capacity, 'floor')) === 0) {
    await call(redis.unwatch())
    return false
  }
  const [charges, expiries] = keys.ledger.slice(2) as [string, string]
  const held = new Map<string, number>()
  const count = (account: string, bytes: number): void => { held.set(account, (held.get(account) ?? 0) + bytes) }
  for await (const [, json] of entriesOf(redis, keys.items)) count((JSON.parse(json) as { contributorId: string }).contributorId, textBytes(json))
  const records: Array<[name: string, entry: string, expiresAt: string | null]> = []
  for await (const [name, charge] of entriesOf(redis, charges)) {
    // A record's charge is "<user id> <bytes>"; a claim's and a session's name their kind after.
    const [account, , kind] = charge.split(' ')
    const text = kind === undefined ? await call(redis.get(name)) : null
    if (text === null) continue
    // A record is {"fingerprint":…,"item":<the item's text>}.
    const bytes = textBytes(text.slice(text.indexOf('"item":') + '"item":'.length, -1))
    count(account!, bytes)
    records.push([name, `${account!} ${bytes}`, await call(redis.zscore(expiries, name))])
  }
  const change = redis.multi().del(keys.accountBytes, keys.recordBytes, keys.recordExpiries, ...keys.ledger).hdel(keys.capacity, ...LEDGER_FIELDS)
  for (const [account, bytes] of held) change.hset(keys.accountBytes, account, bytes)
  for (const [name, entry, expiresAt] of records) {
    change.hset(keys.recordBytes, name, entry)
    if (expiresAt !== null) change.zadd(keys.recordExpiries, expiresAt, name)
  }
  change.hset(keys.capacity, 'accounts', await call(redis.hlen(keys.users)), 'held', [...held.values()].reduce((sum, bytes) => sum + bytes, 0))
  // Null: another start replaced it meanwhile.
  return await call(change.exec()) !== null
}
