import type { Redis } from 'ioredis'
import type { CapacityBounds, CapacityReading } from '../capacity.js'
import { StoreFullError } from '../store.js'
import { call } from './commands.js'
import type { RedisKeys } from './keys.js'

// A budget for the deployment that no store reaches: Lua reads it as a number, which Infinity is not.
const UNBOUNDED_BYTES = 2 ** 53

/**
 * The ledger of src/store/capacity.ts in Lua, for the write scripts that keep what an account causes: each passes
 * the five keys of `capacityKeys` from KEYS[index] on and calls `capacityAt(index)` first. Bytes are reckoned as
 * Redis holds them, conservatively: a value's bytes and a quarter more (jemalloc's size classes round an allocation
 * up by less), and a fixed allowance for the entries that index it (docs/security.md, "Room for each account").
 *
 * - `charge(account, bytes)`: false once charged (a refund, when negative, always is); 'account' past the account's
 *   ceiling, 'store' when it would need more of the shared part than is left; refused, nothing changes.
 * - `admit(account, bytes)`: reserves the account's floor and charges it, or 'store' when no floor is left.
 * - `chargeUntil(name, account, bytes, expiresAt)`: a charge that lasts as long as the key `name` (an idempotency
 *   key, which Redis expires), replacing the one it had; `releaseCharge(name)` gives it back before.
 * - `releaseExpired(now)`: gives back, a few at a time, the charges of keys Redis has expired.
 * - `itemBytes`, `userBytes`, `keyBytes`: what each thing kept is charged.
 */
export const CAPACITY = `
local capacity
-- Bounds no deployment reaches: what a store whose bounds were never set (or were flushed) keeps to.
local UNBOUNDED = '${UNBOUNDED_BYTES}'
local function capacityAt (index)
  capacity = {totals = KEYS[index], bytes = KEYS[index + 1], floors = KEYS[index + 2], charges = KEYS[index + 3], expiries = KEYS[index + 4]}
end
local function stored (length) return math.ceil(length * 1.25) end
-- An item: its JSON in the items hash, and its id in itemOrder and its three sets (keys.ts).
local function itemBytes (json) return stored(#json) + 1024 end
-- A user: its JSON and email key in two hashes, its entries in the capacity hashes.
local function userBytes (id, emailKey, json) return stored(#json + #emailKey + 3 * #id) + 512 end
-- An idempotency key: its name and value, the name again in its user's keys and in capacity-charges and -expiries.
local function keyBytes (name, value) return stored(4 * #name + #value) + 512 end
local function charge (account, bytes)
  local totals = redis.call('HMGET', capacity.totals, 'budget', 'ceiling', 'floors', 'shared')
  local budget, ceiling = tonumber(totals[1] or UNBOUNDED), tonumber(totals[2] or UNBOUNDED)
  local floors, shared = tonumber(totals[3] or '0'), tonumber(totals[4] or '0')
  local held = tonumber(redis.call('HGET', capacity.bytes, account) or '0')
  local floor = tonumber(redis.call('HGET', capacity.floors, account) or '0')
  -- What was kept before accounts were charged (a catalogue of 1.1.0) is given back as far as it was charged.
  if held + bytes < 0 then bytes = -held end
  local nextHeld = held + bytes
  local nextShared = shared + math.max(0, nextHeld - floor) - math.max(0, held - floor)
  if bytes > 0 then
    if nextHeld > ceiling then return 'account' end
    if nextShared > shared and floors + nextShared > budget then return 'store' end
  end
  if nextHeld == 0 and floor == 0 then redis.call('HDEL', capacity.bytes, account) else redis.call('HSET', capacity.bytes, account, nextHeld) end
  redis.call('HINCRBY', capacity.totals, 'held', bytes)
  redis.call('HSET', capacity.totals, 'shared', nextShared)
  return false
end
local function admit (account, bytes)
  local totals = redis.call('HMGET', capacity.totals, 'budget', 'floor', 'floors', 'shared')
  local budget, floor = tonumber(totals[1] or UNBOUNDED), tonumber(totals[2] or '0')
  if tonumber(totals[3] or '0') + floor + tonumber(totals[4] or '0') > budget then return 'store' end
  redis.call('HSET', capacity.floors, account, floor)
  redis.call('HINCRBY', capacity.totals, 'floors', floor)
  redis.call('HINCRBY', capacity.totals, 'accounts', 1)
  return charge(account, bytes)
end
local function chargeOf (name)
  local held = redis.call('HGET', capacity.charges, name)
  if not held then return nil, 0 end
  local account, bytes = string.match(held, '^(%S+) (%d+)$')
  return account, tonumber(bytes)
end
local function releaseCharge (name)
  local account, bytes = chargeOf(name)
  if not account then return end
  redis.call('HDEL', capacity.charges, name)
  redis.call('ZREM', capacity.expiries, name)
  charge(account, -bytes)
end
local function chargeUntil (name, account, bytes, expiresAt)
  local previousAccount, previous = chargeOf(name)
  if previousAccount and previousAccount ~= account then
    releaseCharge(name)
    previous = 0
  end
  local refused = charge(account, bytes - previous)
  if refused then return refused end
  redis.call('HSET', capacity.charges, name, account .. ' ' .. bytes)
  redis.call('ZADD', capacity.expiries, expiresAt, name)
  return false
end
local function releaseExpired (now)
  for _, name in ipairs(redis.call('ZRANGEBYSCORE', capacity.expiries, '-inf', now, 'LIMIT', 0, 16)) do releaseCharge(name) end
end
`

/** The five keys CAPACITY's `capacityAt` takes, in order. */
export type CapacityKeys = [totals: string, bytes: string, floors: string, charges: string, expiries: string]

export const capacityKeys = (keys: RedisKeys): CapacityKeys =>
  [keys.capacity, keys.accountBytes, keys.accountFloors, keys.capacityCharges, keys.capacityExpiries]

/** The bounds of src/store/capacity.ts, the budget left out for one derived from Redis's maxmemory. */
export type RedisCapacityBounds = Omit<CapacityBounds, 'budgetBytes'> & { readonly budgetBytes?: number | undefined }

/** What a script answers when a charge is refused: whose room is full. */
export type Refusal = 'account' | 'store'

/** A script's refusal as the error the store rejects with. */
export function refusal (refused: Refusal): StoreFullError {
  return refused === 'account'
    ? new StoreFullError('the account would pass its ceiling', 'account')
    : new StoreFullError('the shared part of the store is used up, or no floor can be guaranteed')
}

/**
 * Sets the deployment's bounds in Redis, where every instance's scripts read them: the last instance to start sets
 * them for all. Without a budget, two thirds of Redis's maxmemory (the rest is for sessions, limits and deliveries);
 * undefined when Redis has no maxmemory, or will not say: then nothing bounds the store but Redis itself.
 */
export async function setCapacity (redis: Redis, keys: RedisKeys, bounds: RedisCapacityBounds): Promise<number | undefined> {
  let budgetBytes = bounds.budgetBytes
  if (budgetBytes === undefined) {
    const [, maxmemory = '0'] = await redis.config('GET', 'maxmemory').catch(() => []) as string[]
    budgetBytes = Number(maxmemory) > 0 ? Math.floor(Number(maxmemory) * 2 / 3) : undefined
  }
  await call(redis.hset(keys.capacity, 'budget', budgetBytes ?? UNBOUNDED_BYTES, 'floor', bounds.floorBytes, 'ceiling', bounds.ceilingBytes))
  return budgetBytes
}

export async function readCapacity (redis: Redis, keys: RedisKeys): Promise<CapacityReading> {
  const [budget, held, floors, shared, accounts] = await call(redis.hmget(keys.capacity, 'budget', 'held', 'floors', 'shared', 'accounts'))
  return {
    budgetBytes: Number(budget) >= UNBOUNDED_BYTES ? Infinity : Number(budget),
    heldBytes: Number(held ?? 0),
    floorsBytes: Number(floors ?? 0),
    sharedUsedBytes: Number(shared ?? 0),
    accounts: Number(accounts ?? 0)
  }
}
