import type { Redis, Result } from 'ioredis'
import { storedItem } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { chargeRefused, recordsPushedOut } from '../capacity.js'
import { EXPIRED_CHARGES_PER_WRITE } from '../rules.js'
import { type ClaimOutcome, type HeldKey, type IdempotencyClaim, type IdempotencyKeyStore, type StoreFullError, type WriteLimit } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys, keyBytes } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import { afterNow, Change, commit, type Refused } from './commit.js'
import type { RedisKeys } from './keys.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

export const idempotencyKeyScripts = {
  // A limited write script (writeScript): its KEYS and ARGV follow the write limit's. KEYS: the key
  // (idempotencyKey), the user's keys (idempotencyKeys), the capacity keys (CAPACITY). ARGV: the claim as JSON, its
  // lease (ms), the user id, the keys a user holds at most, a record's time to live (ms), what the claim is charged
  // (keyBytes). What holds the key already
  // (counted against no limit), -1 over the write limit, or nil when the claim now does: listed among the user's
  // keys, whose oldest past the bound go (as the memory store's claim), and charged to the user whatever their room
  // (MemoryCapacity.hold says why), in place of any charge the key still had.
  claimIdempotencyKey: {
    numberOfKeys: 3 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY, `
capacityAt(3)
local held = redis.call('GET', KEYS[1])
if held then return refuse(held) end
if overLimit() then return refuse(-1) end
local userId, ttl = ARGV[3], tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4]) + 1
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for index = 1, #oldest, 2 do
    redis.call('DEL', oldest[index])
    releaseCharge(oldest[index])
  end
end
releaseCharge(KEYS[1])
charge(userId, tonumber(ARGV[6]), true)
redis.call('HSET', capacity.charges, KEYS[1], userId .. ' ' .. ARGV[6] .. ' claim')
redis.call('ZADD', capacity.expiries, now + tonumber(ARGV[2]), KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
return false`, { limited: true })
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    claimIdempotencyKey (limitCounter: string, key: string, userKeys: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, limitMax: number,
      limitWindowMs: number, claim: string, leaseMs: number, userId: string, perUser: number, ttlMs: number, bytes: number]): Result<Limited<string | -1 | null>, Context>
  }
}

/**
 * Adds to `change` the pushing out of the user's oldest idempotency records it takes for a charge of `bytes` more to
 * fit their room (recordsPushedOut, on the ledger as read), each guarded by its charge as read: what they free.
 * `refused` when even all of them would not do. Charges of keys Redis has expired are given back first. The charge
 * `replacing` (Change.chargeAccount's) is counted as part of `bytes`.
 */
export async function pushOutRecords (redis: Redis, keys: RedisKeys, change: Change, userId: string, bytes: number, refused: StoreFullError, replacing = ''): Promise<number> {
  await call(redis.releaseExpiredCharges(...capacityKeys(keys), EXPIRED_CHARGES_PER_WRITE))
  const records = `${keys.idempotencyKeys}${userId}`
  // Sent together: one round trip.
  const [names, totals, held, floor] = await Promise.all([call(redis.zrange(records, '0', '-1')),
    call(redis.hmget(keys.capacity, 'ceiling', 'sharedPart', 'shared', 'sessions')), call(redis.hget(keys.accountBytes, userId)), call(redis.hget(keys.accountFloors, userId))])
  // The replaced charge first: HMGET takes one field at least, and no charge has an empty name.
  const [replaced, ...charges] = await call(redis.hmget(keys.capacityCharges, replacing, ...names))
  const [ceilingBytes, sharedPartBytes, sharedUsedBytes, sessionsBytes] = totals.map(Number) as [number, number, number, number]
  const ledger = { ceilingBytes, sharedPartBytes, sharedUsedBytes, sessionsBytes }
  const account = { bytes: Number(held), floor: Number(floor) }
  const [replacedOwner, replacedBytes] = String(replaced).split(' ')
  const needed = bytes - (replacedOwner === userId ? Number(replacedBytes) : 0)
  if (chargeRefused(ledger, account, needed) === undefined) return 0
  // A record's charge is "<user id> <bytes>"; a claim's ends in " claim"; one given back already (expired) has none.
  const own = names.map((name, index) => {
    const charge = String(charges[index])
    const [owner, charged, kind] = charge.split(' ')
    return { name, charge, owner, kind, bytes: Number(charged) }
  }).filter(({ owner, kind }) => owner === userId && kind === undefined)
  const pushedOut = recordsPushedOut(own, (freed) => chargeRefused(ledger, account, needed - freed) !== undefined)
  if (pushedOut === undefined) throw refused
  let freed = 0
  for (const { name, charge, bytes } of pushedOut) {
    forgetKey(change, keys, records, name, charge)
    freed += bytes
  }
  return freed
}

// Forgets the key `name` among `userKeys`, with its charge, while its charge is still `charge` (null: none).
function forgetKey (change: Change, keys: RedisKeys, userKeys: string, name: string, charge: string | null): void {
  change.guard(keys.capacityCharges, name, charge).write('DEL', name).write('ZREM', userKeys, name).write('HDEL', keys.capacityCharges, name)
    .write('ZREM', keys.capacityExpiries, name)
}

/**
 * Adds to `change` the forgetting of every idempotency key of the user's (the account's removal), as read now, each
 * guarded by its charge as read: what their charges to the user give back.
 */
export async function forgetUserKeys (redis: Redis, keys: RedisKeys, change: Change, userId: string): Promise<number> {
  const userKeys = `${keys.idempotencyKeys}${userId}`
  const names = await call(redis.zrange(userKeys, '0', '-1'))
  if (names.length === 0) return 0
  const charges = await call(redis.hmget(keys.capacityCharges, ...names))
  let released = 0
  // One charge for each name asked about.
  charges.forEach((charge, index) => {
    forgetKey(change, keys, userKeys, names[index]!, charge)
    released += chargedTo(userId, charge)
  })
  return released
}

// What the charge `charge` ("<user id> <bytes>", a claim's followed by " claim"; null: none) charges the user.
function chargedTo (userId: string, charge: string | null): number {
  const [owner, bytes] = String(charge).split(' ')
  return owner === userId ? Number(bytes) : 0
}

export interface IdempotencyKeyBounds {
  readonly ttlMs: number
  readonly perUser: number
}

const keyOf = (keys: RedisKeys, { userId, key }: IdempotencyClaim): string => `${keys.idempotencyKey}${userId}:${key}`
const claimJson = ({ token, fingerprint }: IdempotencyClaim): string => JSON.stringify({ token, fingerprint })

/** A create's item recorded under its claim's key: the key's name, the claim, the record's text and what it is charged. */
export interface CreateRecord {
  readonly name: string
  readonly claim: string
  readonly text: string
  readonly bytes: number
}

export function createRecord (keys: RedisKeys, claim: IdempotencyClaim, itemJson: string): CreateRecord {
  const name = keyOf(keys, claim)
  const text = `{"fingerprint":${JSON.stringify(claim.fingerprint)},"item":${itemJson}}`
  return { name, claim: claimJson(claim), text, bytes: keyBytes(name, text) }
}

/**
 * Adds to `change` the record of `userId`'s create, while its claim holds the key or nothing does (else `commit`
 * answers `lost`), for the time to live: it takes the claim's place among the user's keys, and its charge the
 * claim's (Change.chargeAccount's `replacing`, by the caller).
 */
export function recordCreate (change: Change, keys: RedisKeys, userId: string, ttlMs: number, { name, claim, text, bytes }: CreateRecord, lost: Refused): Change {
  const userKeys = `${keys.idempotencyKeys}${userId}`
  const ttl = String(ttlMs)
  return change.guardUnlessTaken(name, claim, lost).write('SET', name, text, 'PX', ttl)
    .write('HSET', keys.capacityCharges, name, `${userId} ${bytes}`).write('ZADD', keys.capacityExpiries, afterNow(ttlMs), name)
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
      name, this.#userKeys(claim), ...capacityKeys(this.#keys), deadline, outcomeKey, limitMax, limitWindowMs, json, leaseMs,
      claim.userId, perUser, ttlMs, keyBytes(name, json))), limit)
    return held === null ? { status: 'claimed' } : heldKey(held, claim)
  }

  async release (claim: IdempotencyClaim): Promise<void> {
    const keys = this.#keys
    const name = keyOf(keys, claim)
    const json = claimJson(claim)
    const [held, charge] = await Promise.all([call(this.#redis.get(name)), call(this.#redis.hget(keys.capacityCharges, name))])
    if (held !== json) return
    // Forgotten while the claim holds the key, or nothing does (its lease ended), with its charge as read. Refused,
    // the claim is gone meanwhile (its charge given back, the key claimed again): nothing is left to free.
    const change = new Change().guardUnlessTaken(name, json, 0)
    forgetKey(change, keys, this.#userKeys(claim), name, charge)
    change.chargeAccount(keys, claim.userId, -chargedTo(claim.userId, charge))
    await commit(this.#redis, this.#writes, keys, change)
  }

  #userKeys ({ userId }: IdempotencyClaim): string {
    return `${this.#keys.idempotencyKeys}${userId}`
  }

  // Redis's clock decides what has expired, for every instance alike.
  async sweep (_now: number, limit: number): Promise<number> {
    return await call(this.#redis.releaseExpiredCharges(...capacityKeys(this.#keys), limit))
  }
}
