import type { Redis, Result } from 'ioredis'
import { type StoredItem, storedItem, TEXT } from '../../domain/serialized.js'
import type { IdempotencyKeyBounds } from '../../domain/bounds.js'
import type { Item } from '../../domain/index.js'
import { recordBytes } from '../../domain/items.js'
import { recordsForgotten } from '../../domain/quotas.js'
import { type ClaimOutcome, type HeldKey, type IdempotencyClaim, type IdempotencyKeyStore, QuotaExceededError, type WriteLimit } from '../store.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import { afterNow, Change, commit, type Refused } from './commit.js'
import type { RedisKeys } from './keys.js'
import { RECORD_KEYS, type RecordKeys, recordKeys, RECORDS } from './quotas.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

// Records past their time that a write short of room forgets first (the sweep forgets the rest).
const EXPIRED_RECORDS_PER_WRITE = 16

export const idempotencyKeyScripts = {
  // A limited write script (writeScript): its KEYS and ARGV follow the write limit's. KEYS: the key
  // (idempotencyKey), the user's keys (idempotencyKeys), the record keys (RECORDS). ARGV: the claim as JSON, its
  // lease (ms), the keys a user holds at most, a record's time to live (ms). What holds the key already (counted
  // against no limit), -1 over the write limit, or nil when the claim now does: listed among the user's keys, whose
  // oldest past the bound go with their records' bytes (as the memory store's claim).
  claimIdempotencyKey: {
    numberOfKeys: 3 + RECORD_KEYS,
    lua: writeScript(RECORDS, `
recordsAt(3)
local held = redis.call('GET', KEYS[1])
if held then return refuse(held) end
if overLimit() then return refuse(-1) end
local ttl = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3]) + 1
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for index = 1, #oldest, 2 do
    redis.call('DEL', oldest[index])
    forgetRecord(oldest[index])
  end
end
-- A record Redis has expired, whose bytes the sweep has not given back yet.
forgetRecord(KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
return false`, { limited: true })
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    claimIdempotencyKey (limitCounter: string, key: string, userKeys: string, ...args: [...RecordKeys, deadline: WriteDeadline, outcomeKey: string, limitMax: number,
      limitWindowMs: number, claim: string, leaseMs: number, perUser: number, ttlMs: number]): Result<Limited<string | -1 | null>, Context>
  }
}

/**
 * Adds to `change` the forgetting of as few of the user's own oldest records as it takes for `bytes` more to fit
 * their quota (src/domain/quotas.ts, on the bytes as read), each guarded by its entry as read: what they free. A
 * QuotaExceededError when even all of them would not do. Records Redis has expired are forgotten first.
 */
export async function makeRoom (redis: Redis, keys: RedisKeys, change: Change, userId: string, bytes: number, quotaBytes: number): Promise<number> {
  await call(redis.forgetExpiredRecords(...recordKeys(keys), EXPIRED_RECORDS_PER_WRITE))
  const userKeys = `${keys.idempotencyKeys}${userId}`
  // Sent together: one round trip.
  const [names, held] = await Promise.all([call(redis.zrange(userKeys, '0', '-1')), call(redis.hget(keys.accountBytes, userId))])
  const entries = names.length === 0 ? [] : await call(redis.hmget(keys.recordBytes, ...names))
  // A claim has no entry: its request still runs.
  const records = names.flatMap((name, index) => entries[index] == null ? [] : [{ name, entry: entries[index]!, bytes: bytesOf(entries[index]!) }])
  const forgotten = recordsForgotten(records, Number(held ?? 0), bytes, quotaBytes)
  if (forgotten === undefined) throw new QuotaExceededError(quotaBytes)
  let freed = 0
  for (const { name, entry, bytes } of forgotten) {
    forgetKey(change, keys, userKeys, name, entry)
    freed += bytes
  }
  return freed
}

// Forgets the key `name` among `userKeys`, while its entry in recordBytes is still `entry` (null: none).
function forgetKey (change: Change, keys: RedisKeys, userKeys: string, name: string, entry: string | null): void {
  change.guard(keys.recordBytes, name, entry).write('DEL', name).write('ZREM', userKeys, name)
  if (entry !== null) change.write('HDEL', keys.recordBytes, name).write('ZREM', keys.recordExpiries, name)
}

/**
 * Adds to `change` the forgetting of every idempotency key of the user's (the account's removal), as read now, each
 * guarded by its entry as read: the bytes their records give back.
 */
export async function forgetUserKeys (redis: Redis, keys: RedisKeys, change: Change, userId: string): Promise<number> {
  const userKeys = `${keys.idempotencyKeys}${userId}`
  const names = await call(redis.zrange(userKeys, '0', '-1'))
  if (names.length === 0) return 0
  const entries = await call(redis.hmget(keys.recordBytes, ...names))
  let released = 0
  // One entry for each name asked about.
  entries.forEach((entry, index) => {
    forgetKey(change, keys, userKeys, names[index]!, entry)
    released += entry === null ? 0 : bytesOf(entry)
  })
  return released
}

// What the entry "<user id> <bytes>" of a key of the user's (its name holds the user's id) counts against their quota.
const bytesOf = (entry: string): number => Number(entry.split(' ')[1])

const keyOf = (keys: RedisKeys, { userId, key }: IdempotencyClaim): string => `${keys.idempotencyKey}${userId}:${key}`
const claimJson = ({ token, fingerprint }: IdempotencyClaim): string => JSON.stringify({ token, fingerprint })

/** A create's item recorded under its claim's key: the key's name, the claim, the record's text and what it counts against its user's quota. */
export interface CreateRecord {
  readonly name: string
  readonly claim: string
  readonly text: string
  readonly bytes: number
}

export function createRecord (keys: RedisKeys, claim: IdempotencyClaim, item: StoredItem): CreateRecord {
  const name = keyOf(keys, claim)
  const text = `{"fingerprint":${JSON.stringify(claim.fingerprint)},"item":${item[TEXT]}}`
  return { name, claim: claimJson(claim), text, bytes: recordBytes(item) }
}

/**
 * Adds to `change` the record of `userId`'s create, while its claim holds the key or nothing does (else `commit`
 * answers `lost`), for the time to live: it takes the claim's place among the user's keys. Its bytes are counted
 * by the caller, with its item's.
 */
export function recordCreate (change: Change, keys: RedisKeys, userId: string, ttlMs: number, { name, claim, text, bytes }: CreateRecord, lost: Refused): Change {
  const userKeys = `${keys.idempotencyKeys}${userId}`
  const ttl = String(ttlMs)
  return change.guardUnlessTaken(name, claim, lost).write('SET', name, text, 'PX', ttl)
    .write('HSET', keys.recordBytes, name, `${userId} ${bytes}`).write('ZADD', keys.recordExpiries, afterNow(ttlMs), name)
    .write('ZADD', userKeys, afterNow(0), name).write('PEXPIRE', userKeys, ttl)
}

type Held = { readonly fingerprint: string, readonly token: string } | { readonly fingerprint: string, readonly item: Item }

function heldKey (json: string, claim: IdempotencyClaim): HeldKey {
  const held = JSON.parse(json) as Held
  if (held.fingerprint !== claim.fingerprint) return { status: 'mismatch' }
  return 'item' in held ? { status: 'recorded', item: storedItem(held.item) } : { status: 'running' }
}

/** Idempotency keys on Redis, shared by every instance; a create is recorded by the change that adds it (recordCreate, items.ts). */
export class RedisIdempotencyKeys implements IdempotencyKeyStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #bounds: IdempotencyKeyBounds

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, bounds: IdempotencyKeyBounds) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#bounds = bounds
  }

  async claim (claim: IdempotencyClaim, leaseMs: number, limit?: WriteLimit): Promise<ClaimOutcome> {
    const [limitCounter, limitMax, limitWindowMs] = limitArguments(this.#keys, limit)
    const { ttlMs, perUser } = this.#bounds
    const name = keyOf(this.#keys, claim)
    const json = claimJson(claim)
    const held = limitedOutcome(await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.claimIdempotencyKey(limitCounter,
      name, this.#userKeys(claim), ...recordKeys(this.#keys), deadline, outcomeKey, limitMax, limitWindowMs, json, leaseMs, perUser, ttlMs)), limit)
    return held === null ? { status: 'claimed' } : heldKey(held, claim)
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    const keys = this.#keys
    const name = keyOf(keys, claim)
    const json = claimJson(claim)
    if (await call(this.#redis.get(name)) !== json) return
    // Forgotten while the claim holds the key, or nothing does (its lease ended). Refused, the key is claimed again
    // meanwhile: nothing is left to free.
    const change = new Change().guardUnlessTaken(name, json, 0)
    forgetKey(change, keys, this.#userKeys(claim), name, null)
    await commit(this.#redis, this.#writes, keys, change)
  }

  #userKeys ({ userId }: IdempotencyClaim): string {
    return `${this.#keys.idempotencyKeys}${userId}`
  }

  // Redis's clock decides what has expired, for every instance alike.
  async sweep (_now: number, limit: number): Promise<number> {
    return await call(this.#redis.forgetExpiredRecords(...recordKeys(this.#keys), limit))
  }
}
