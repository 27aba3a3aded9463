import type { Redis, Result } from 'ioredis'
import { storedItem } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { chargeRefused, recordsPushedOut } from '../capacity.js'
import { EXPIRED_CHARGES_PER_WRITE } from '../rules.js'
import { type ClaimOutcome, type HeldKey, type IdempotencyClaim, type IdempotencyKeyStore, type StoreFullError, type WriteLimit } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import type { Change } from './commit.js'
import type { RedisKeys } from './keys.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

export const idempotencyKeyScripts = {
  // A limited write script (writeScript): its KEYS and ARGV follow the write limit's. KEYS: the key
  // (idempotencyKey), the capacity keys (CAPACITY). ARGV: the claim as JSON, its lease (ms), the user id. What holds
  // the key already (counted against no limit), -1 over the write limit, or nil when the claim now does: charged to
  // the user whatever their room (MemoryCapacity.hold says why).
  claimIdempotencyKey: {
    numberOfKeys: 2 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY, `
capacityAt(2)
local held = redis.call('GET', KEYS[1])
if held then return refuse(held) end
if overLimit() then return refuse(-1) end
local bytes, expiresAt = keyBytes(KEYS[1], ARGV[1]), now + tonumber(ARGV[2])
chargeUntil(KEYS[1], ARGV[3], bytes, expiresAt, true)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false`, { limited: true })
  },
  // KEYS: the key, the capacity keys. ARGV: the claim as JSON. Frees the key, and its charge, if the claim still
  // holds it.
  releaseIdempotencyKey: {
    numberOfKeys: 1 + CAPACITY_KEYS,
    lua: `${CAPACITY}
capacityAt(2)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  releaseCharge(KEYS[1])
end
return 1`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    claimIdempotencyKey (limitCounter: string, key: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, limitMax: number,
      limitWindowMs: number, claim: string, leaseMs: number, userId: string]): Result<Limited<string | -1 | null>, Context>
    releaseIdempotencyKey (key: string, ...args: [...CapacityKeys, claim: string]): Result<1, Context>
  }
}

/**
 * Opens a script that records a create under an idempotency key, its claim given as KEYS[key] (the key) and
 * KEYS[key + 1] (the user's keys), ARGV[argument] (the claim as JSON), ARGV[argument + 1] (the record),
 * ARGV[argument + 2] (its time to live, ms) and ARGV[argument + 3] (keys per user); an empty KEYS[key] means no
 * claim. `holdsClaim` says whether the claim still holds its key (or none does); `recordBytes` is what the record
 * would charge beyond its claim; `chargeRecord` charges the record to `account` in place of its claim (false, or
 * CAPACITY's refusal); `recordClaim` then replaces the claim with the
 * record, listed in the user's keys, of which the oldest beyond the bound go. Uses writeScript's `now` and CAPACITY.
 */
export const RECORD_CLAIM = `
local function holdsClaim (key, argument)
  if KEYS[key] == '' then return true end
  local held = redis.call('GET', KEYS[key])
  return not held or held == ARGV[argument]
end
-- What recording would charge beyond what the claim is charged.
local function recordBytes (key, argument)
  if KEYS[key] == '' then return 0 end
  local _, claimed = chargeOf(KEYS[key])
  return keyBytes(KEYS[key], ARGV[argument + 1]) - claimed
end
local function chargeRecord (key, argument, account)
  if KEYS[key] == '' then return false end
  return chargeUntil(KEYS[key], account, keyBytes(KEYS[key], ARGV[argument + 1]), now + tonumber(ARGV[argument + 2]))
end
local function recordClaim (key, argument)
  if KEYS[key] == '' then return end
  local keys, ttl = KEYS[key + 1], tonumber(ARGV[argument + 2])
  redis.call('SET', KEYS[key], ARGV[argument + 1], 'PX', ttl)
  redis.call('ZADD', keys, now, KEYS[key])
  redis.call('ZREMRANGEBYSCORE', keys, '-inf', now - ttl)
  local over = redis.call('ZCARD', keys) - tonumber(ARGV[argument + 3])
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', keys, over)
    for index = 1, #oldest, 2 do
      redis.call('DEL', oldest[index])
      releaseCharge(oldest[index])
    end
  end
  redis.call('PEXPIRE', keys, ttl)
end
`

/**
 * Adds to `change` the pushing out of the user's oldest idempotency records it takes for a charge of `bytes` more to
 * fit their room (recordsPushedOut, on the ledger as read), each guarded by its charge as read: what they free.
 * `refused` when even all of them would not do. Charges of keys Redis has expired are given back first.
 */
export async function pushOutRecords (redis: Redis, keys: RedisKeys, change: Change, userId: string, bytes: number, refused: StoreFullError): Promise<number> {
  await call(redis.releaseExpiredCharges(...capacityKeys(keys), EXPIRED_CHARGES_PER_WRITE))
  const records = `${keys.idempotencyKeys}${userId}`
  // Sent together: one round trip.
  const [names, totals, held, floor] = await Promise.all([call(redis.zrange(records, '0', '-1')),
    call(redis.hmget(keys.capacity, 'ceiling', 'sharedPart', 'shared', 'sessions')), call(redis.hget(keys.accountBytes, userId)), call(redis.hget(keys.accountFloors, userId))])
  // '' first: HMGET takes one field at least, and no charge has an empty name.
  const charges = await call(redis.hmget(keys.capacityCharges, '', ...names))
  const [ceilingBytes, sharedPartBytes, sharedUsedBytes, sessionsBytes] = totals.map(Number) as [number, number, number, number]
  const ledger = { ceilingBytes, sharedPartBytes, sharedUsedBytes, sessionsBytes }
  const account = { bytes: Number(held), floor: Number(floor) }
  if (chargeRefused(ledger, account, bytes) === undefined) return 0
  // A record's charge is "<user id> <bytes>"; one given back already (expired) has none, and no owner ("null").
  const own = names.map((name, index) => {
    const charge = String(charges[index + 1])
    const [owner, charged] = charge.split(' ')
    return { name, charge, owner, bytes: Number(charged) }
  }).filter(({ owner }) => owner === userId)
  const pushedOut = recordsPushedOut(own, (freed) => chargeRefused(ledger, account, bytes - freed) !== undefined)
  if (pushedOut === undefined) throw refused
  let freed = 0
  for (const { name, charge, bytes } of pushedOut) {
    change.guard(keys.capacityCharges, name, charge).write('DEL', name).write('ZREM', records, name).write('HDEL', keys.capacityCharges, name)
      .write('ZREM', keys.capacityExpiries, name)
    freed += bytes
  }
  return freed
}

export interface IdempotencyKeyBounds {
  readonly ttlMs: number
  readonly perUser: number
}

/** A claim's two keys and four arguments for RECORD_CLAIM; empty ones (that it ignores) without a claim. */
export interface ClaimArguments {
  readonly keys: [key: string, userKeys: string]
  readonly arguments: [claim: string, record: string, ttlMs: number, perUser: number]
}

const keyOf = (keys: RedisKeys, { userId, key }: IdempotencyClaim): string => `${keys.idempotencyKey}${userId}:${key}`
const claimJson = ({ token, fingerprint }: IdempotencyClaim): string => JSON.stringify({ token, fingerprint })

export function claimArguments (keys: RedisKeys, bounds: IdempotencyKeyBounds, claim: IdempotencyClaim | undefined, itemJson: string): ClaimArguments {
  if (claim === undefined) return { keys: ['', ''], arguments: ['', '', 0, 0] }
  const record = `{"fingerprint":${JSON.stringify(claim.fingerprint)},"item":${itemJson}}`
  return {
    keys: [keyOf(keys, claim), `${keys.idempotencyKeys}${claim.userId}`],
    arguments: [claimJson(claim), record, bounds.ttlMs, bounds.perUser]
  }
}

type Held = { readonly fingerprint: string, readonly token: string } | { readonly fingerprint: string, readonly item: Item }

function heldKey (json: string, claim: IdempotencyClaim): HeldKey {
  const held = JSON.parse(json) as Held
  if (held.fingerprint !== claim.fingerprint) return { status: 'mismatch' }
  return 'item' in held ? { status: 'recorded', item: storedItem(held.item) } : { status: 'running' }
}

/** Idempotency keys on Redis, shared by every instance; a create is recorded by the item script that adds it (items.ts). */
export class RedisIdempotencyKeys implements IdempotencyKeyStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
  }

  async claim (claim: IdempotencyClaim, leaseMs: number, limit?: WriteLimit): Promise<ClaimOutcome> {
    const [limitCounter, limitMax, limitWindowMs] = limitArguments(this.#keys, limit)
    const json = limitedOutcome(await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.claimIdempotencyKey(limitCounter,
      keyOf(this.#keys, claim), ...capacityKeys(this.#keys), deadline, outcomeKey, limitMax, limitWindowMs, claimJson(claim), leaseMs, claim.userId)), limit)
    return json === null ? { status: 'claimed' } : heldKey(json, claim)
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    await this.#writes.runRepeatable(async () => await this.#redis.releaseIdempotencyKey(keyOf(this.#keys, claim), ...capacityKeys(this.#keys), claimJson(claim)))
  }

  // Redis's clock decides what has expired, for every instance alike.
  async sweep (_now: number, limit: number): Promise<number> {
    return await call(this.#redis.releaseExpiredCharges(...capacityKeys(this.#keys), limit))
  }
}
