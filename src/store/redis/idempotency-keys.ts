import type { Redis, Result } from 'ioredis'
import { type StoredItem, storedItem, TEXT } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { type CreateRecord, recordBytes } from '../../domain/items.js'
import { recordsForgotten } from '../../domain/quotas.js'
import { type IdempotencyKey, type IdempotencyKeyStore, KeyInUseError, QuotaExceededError } from '../store.js'
import { call, type Script } from './commands.js'
import { afterNow, type Change } from './commit.js'
import type { RedisKeys } from './keys.js'
import { RECORD_KEYS, type RecordKeys, recordKeys, RECORDS } from './quotas.js'

// Records past their time that a write short of room forgets first (the sweep forgets the rest).
const EXPIRED_RECORDS_PER_WRITE = 16

export const idempotencyKeyScripts = {
  // Sent before a keyed create, on the same connection: makes room in the user's count of keys for the key the
  // create records, forgetting their oldest past the most they keep (with their records' bytes), unless the key is
  // recorded already (a replay makes no room); a record of the key Redis has expired, whose bytes the sweep has not
  // given back yet, goes first. KEYS: the user's keys (idempotencyKeys), the key, the record keys (RECORDS). ARGV:
  // the keys a user keeps at most. How many it forgot past the bound.
  forgetOldestKeys: {
    numberOfKeys: 2 + RECORD_KEYS,
    lua: `${RECORDS}
recordsAt(3)
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
forgetRecord(KEYS[2])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1]) + 1
if over <= 0 then return 0 end
local oldest = redis.call('ZPOPMIN', KEYS[1], over)
for index = 1, #oldest, 2 do
  redis.call('DEL', oldest[index])
  forgetRecord(oldest[index])
end
return over`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    forgetOldestKeys (userKeys: string, key: string, ...args: [...RecordKeys, perUser: number]): Result<number, Context>
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
  // A key with no entry has expired, its bytes given back already.
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

const keyOf = (keys: RedisKeys, { userId, key }: IdempotencyKey): string => `${keys.idempotencyKey}${userId}:${key}`

/** A create's item recorded under its key: the key's name, the record's text and what it counts against its user's quota. */
export interface KeyRecord {
  readonly name: string
  readonly text: string
  readonly bytes: number
}

export function keyRecord (keys: RedisKeys, key: IdempotencyKey, item: StoredItem): KeyRecord {
  const text = `{"fingerprint":${JSON.stringify(key.fingerprint)},"item":${item[TEXT]}}`
  return { name: keyOf(keys, key), text, bytes: recordBytes(item) }
}

/**
 * Adds to `change` the record of `userId`'s create, while nothing holds its key (else `commit` answers what does),
 * for the time to live, the newest of the user's keys: its entry in recordBytes takes the place of an expired
 * record's, which `makeKeyRoom`, run first, has given back. Its bytes are counted by the caller, with its item's.
 */
export function recordCreate (change: Change, keys: RedisKeys, userId: string, ttlMs: number, { name, text, bytes }: KeyRecord): Change {
  const userKeys = `${keys.idempotencyKeys}${userId}`
  const ttl = String(ttlMs)
  return change.guardVacant(name).write('SET', name, text, 'PX', ttl)
    .write('HSET', keys.recordBytes, name, `${userId} ${bytes}`).write('ZADD', keys.recordExpiries, afterNow(ttlMs), name)
    .write('ZADD', userKeys, afterNow(0), name).write('PEXPIRE', userKeys, ttl)
}

/**
 * Sends, not waiting for its answer, what makes room for `record` (forgetOldestKeys): sent before the create's
 * commit, on the same connection, Redis runs it first, and the two take one round trip. What fails it (the
 * connection lost, Redis out of memory) fails the commit sent after it.
 */
export function makeKeyRoom (redis: Redis, keys: RedisKeys, userId: string, { name }: KeyRecord, perUser: number): void {
  // What it forgot, or its failure, changes nothing of the create's answer.
  redis.forgetOldestKeys(`${keys.idempotencyKeys}${userId}`, name, ...recordKeys(keys), perUser).catch(() => {})
}

/**
 * The create a key's text records; a KeyInUseError for a key that a release before 1.2.0 claimed for a request that
 * still runs there (during a rolling upgrade), which names no create yet.
 */
export function heldRecord (text: string): CreateRecord {
  const held = JSON.parse(text) as { readonly fingerprint: string, readonly item?: Item }
  if (held.item === undefined) throw new KeyInUseError('the idempotency key is claimed by a request running on an earlier release')
  return { fingerprint: held.fingerprint, item: storedItem(held.item) }
}

/** Idempotency keys on Redis, shared by every instance; a create is recorded by the change that adds it (recordCreate, items.ts). */
export class RedisIdempotencyKeys implements IdempotencyKeyStore {
  readonly #redis: Redis
  readonly #keys: RedisKeys

  constructor (redis: Redis, keys: RedisKeys) {
    this.#redis = redis
    this.#keys = keys
  }

  // Redis's clock decides what has expired, for every instance alike.
  async sweep (_now: number, limit: number): Promise<number> {
    return await call(this.#redis.forgetExpiredRecords(...recordKeys(this.#keys), limit))
  }
}
