import type { Redis, Result } from 'ioredis'
import { type CapacityBounds, type CapacityReading, type CapacitySettings, floorsKept, PACE_BURST_SHARE, sharedPart } from '../capacity.js'
import { RegistrationPacedError, type RoomLimit, StoreFullError } from '../store.js'
import { call, type Script } from './commands.js'
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
 *   ceiling, 'shared' when it would need more of the shared part than is left; refused, nothing changes.
 * - `admit(account, bytes, now)`: reserves the account's floor and charges it; 'registration' when no floor is
 *   left, 'pace' and the ms to wait when the pace on registrations holds it back.
 * - `chargeUntil(name, account, bytes, expiresAt)`: a charge that lasts as long as the key `name` (an idempotency
 *   key, which Redis expires), replacing the one it had; `releaseCharge(name)` gives it back before.
 * - `chargeSessionUntil(name, account, bytes, expiresAt)`: the same for a session (`name` its key), charged to the
 *   part of the account's floor kept for its sessions, never refused; `sessionsRoom(account)`, what is left of it.
 * - `releaseExpired(now)`: gives back, a few at a time, the charges of keys Redis has expired.
 * - `itemBytes`, `userBytes`, `keyBytes`, `sessionBytes`: what each thing kept is charged.
 */
export const CAPACITY = `
local capacity
-- Bounds no deployment reaches: what a store whose bounds were never set (or were flushed) keeps to.
local UNBOUNDED = '${UNBOUNDED_BYTES}'
local function capacityAt (index)
  capacity = {totals = KEYS[index], bytes = KEYS[index + 1], floors = KEYS[index + 2], charges = KEYS[index + 3], expiries = KEYS[index + 4],
    sessions = KEYS[index + 5]}
end
local function stored (length) return math.ceil(length * 1.25) end
-- An item: its JSON in the items hash, and its id in itemOrder and its three sets (keys.ts).
local function itemBytes (json) return stored(#json) + 1024 end
-- A user: its JSON and email key in two hashes, its entries in the capacity hashes.
local function userBytes (id, emailKey, json) return stored(#json + #emailKey + 3 * #id) + 512 end
-- An idempotency key: its name and value, the name again in its user's keys and in capacity-charges and -expiries.
local function keyBytes (name, value) return stored(4 * #name + #value) + 512 end
-- A session: its hash (its user, times and token hashes), its id in its user's sessions, its name in capacity-charges
-- and -expiries; and for each token hash remembered, the refresh token's key and value and the hash in the session's.
local function sessionBytes (name, tokenKey, hashes) return stored(4 * #name + 64 + hashes * (2 * #tokenKey + 64)) + 512 + 64 * hashes end
local function charge (account, bytes)
  local totals = redis.call('HMGET', capacity.totals, 'ceiling', 'sharedPart', 'shared')
  local ceiling, sharedPart = tonumber(totals[1] or UNBOUNDED), tonumber(totals[2] or UNBOUNDED)
  local shared = tonumber(totals[3] or '0')
  local held = tonumber(redis.call('HGET', capacity.bytes, account) or '0')
  local floor = tonumber(redis.call('HGET', capacity.floors, account) or '0')
  -- What was kept before accounts were charged (a catalogue of 1.1.0) is given back as far as it was charged.
  if held + bytes < 0 then bytes = -held end
  local nextHeld = held + bytes
  local nextShared = shared + math.max(0, nextHeld - floor) - math.max(0, held - floor)
  if bytes > 0 then
    if nextHeld > ceiling then return 'account' end
    if nextShared > shared and nextShared > sharedPart then return 'shared' end
  end
  if nextHeld == 0 and floor == 0 then redis.call('HDEL', capacity.bytes, account) else redis.call('HSET', capacity.bytes, account, nextHeld) end
  redis.call('HINCRBY', capacity.totals, 'held', bytes)
  redis.call('HSET', capacity.totals, 'shared', nextShared)
  return false
end
-- The pace on registrations of src/store/capacity.ts (takeRegistration): false once one is taken, else the ms
-- until one is let through.
local function takeRegistration (floorsLeft, room, at)
  local pace = redis.call('HMGET', capacity.totals, 'paceTokens', 'paceAt')
  local perMs = floorsLeft / room
  local size = math.max(1, floorsLeft * ${PACE_BURST_SHARE})
  local tokens = size
  if pace[1] then tokens = math.min(size, tonumber(pace[1]) + math.max(0, at - tonumber(pace[2])) * perMs) end
  if tokens < 1 then return math.ceil((1 - tokens) / perMs) end
  redis.call('HSET', capacity.totals, 'paceTokens', tostring(tokens - 1), 'paceAt', at)
  return false
end
-- 'registration' when no floor is left, 'pace' and the ms to wait when the pace holds it back (only when the time
-- 'at' is given: a start that admits 1.1.0's accounts is not paced).
local function admit (account, bytes, at)
  local totals = redis.call('HMGET', capacity.totals, 'floor', 'floors', 'floorsKept', 'sessions', 'room')
  local floor, floors, kept = tonumber(totals[1] or '0'), tonumber(totals[2] or '0'), tonumber(totals[3] or UNBOUNDED)
  if floor > 0 then
    local floorsLeft = math.floor((kept - floors) / floor)
    if floorsLeft < 1 then return 'registration' end
    local room = tonumber(totals[5] or '0')
    if at and room > 0 and kept < tonumber(UNBOUNDED) then
      local wait = takeRegistration(floorsLeft, room, at)
      if wait then return 'pace', wait end
    end
  end
  -- What the account's sessions may keep is reserved apart: charge() reckons with the rest of the floor.
  redis.call('HSET', capacity.floors, account, math.max(0, floor - tonumber(totals[4] or UNBOUNDED)))
  redis.call('HINCRBY', capacity.totals, 'floors', floor)
  redis.call('HINCRBY', capacity.totals, 'accounts', 1)
  return charge(account, bytes)
end
local function chargeSessions (account, bytes)
  local held = tonumber(redis.call('HGET', capacity.sessions, account) or '0')
  if held + bytes < 0 then bytes = -held end
  if held + bytes == 0 then redis.call('HDEL', capacity.sessions, account) else redis.call('HSET', capacity.sessions, account, held + bytes) end
  redis.call('HINCRBY', capacity.totals, 'held', bytes)
end
local function sessionsRoom (account)
  return tonumber(redis.call('HGET', capacity.totals, 'sessions') or UNBOUNDED) - tonumber(redis.call('HGET', capacity.sessions, account) or '0')
end
-- A charge's entry: its account, its bytes, and 'session' for a session's.
local function chargeOf (name)
  local held = redis.call('HGET', capacity.charges, name)
  if not held then return nil, 0 end
  local account, bytes, kind = string.match(held, '^(%S+) (%d+) ?(%l*)$')
  return account, tonumber(bytes), kind
end
local function releaseCharge (name)
  local account, bytes, kind = chargeOf(name)
  if not account then return end
  redis.call('HDEL', capacity.charges, name)
  redis.call('ZREM', capacity.expiries, name)
  if kind == 'session' then chargeSessions(account, -bytes) else charge(account, -bytes) end
end
local function chargeSessionUntil (name, account, bytes, expiresAt)
  local _, previous = chargeOf(name)
  chargeSessions(account, bytes - previous)
  redis.call('HSET', capacity.charges, name, account .. ' ' .. bytes .. ' session')
  redis.call('ZADD', capacity.expiries, expiresAt, name)
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

/** The keys CAPACITY's `capacityAt` takes, in order. */
export type CapacityKeys = [totals: string, bytes: string, floors: string, charges: string, expiries: string, sessions: string]

export const capacityKeys = (keys: RedisKeys): CapacityKeys =>
  [keys.capacity, keys.accountBytes, keys.accountFloors, keys.capacityCharges, keys.capacityExpiries, keys.accountSessionBytes]

/** How many keys `capacityKeys` gives a script. */
export const CAPACITY_KEYS: CapacityKeys['length'] = 6

// Users a script admits at a time, at a start that finds accounts without floors.
const ACCOUNTS_ADMITTED_PER_CALL = 100

export const capacityScripts = {
  // KEYS: users, the capacity keys. ARGV: user ids. Admits each that has no floor (an account of 1.1.0, registered
  // before floors were kept), its record charged as if its email key were as long as the record (it is part of
  // it): the script reads no user's text. How many could not be admitted, no floor being left.
  admitAccounts: {
    numberOfKeys: 1 + CAPACITY_KEYS,
    lua: `${CAPACITY}
capacityAt(2)
local refused = 0
for _, id in ipairs(ARGV) do
  local json = redis.call('HGET', KEYS[1], id)
  if json and redis.call('HEXISTS', capacity.floors, id) == 0 then
    if admit(id, userBytes(id, json, json), nil) then refused = refused + 1 end
  end
end
return refused`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    admitAccounts (users: string, ...args: [...CapacityKeys, ...ids: string[]]): Result<number, Context>
  }
}

/**
 * Admits every account that has no floor: those a catalogue of 1.1.0 holds, at the first start after it. Checked at
 * every start, and done only while the store holds more users than accounts admitted. How many could not be.
 */
export async function admitAccounts (redis: Redis, keys: RedisKeys): Promise<number> {
  const [users, admitted] = await Promise.all([call(redis.hlen(keys.users)), call(redis.hget(keys.capacity, 'accounts'))])
  if (users <= Number(admitted ?? 0)) return 0
  let refused = 0
  let cursor = '0'
  do {
    const [next, fields] = await call(redis.hscan(keys.users, cursor, 'COUNT', ACCOUNTS_ADMITTED_PER_CALL))
    const ids = fields.filter((_field, index) => index % 2 === 0)
    if (ids.length > 0) refused += await call(redis.admitAccounts(keys.users, ...capacityKeys(keys), ...ids))
    cursor = next
  } while (cursor !== '0')
  return refused
}

/** What a script answers when a charge is refused: whose room is full. */
export type Refusal = RoomLimit

const REFUSALS: Readonly<Record<Refusal, string>> = {
  account: 'the account would pass its ceiling',
  shared: 'the shared part of the store is used up',
  registration: 'no floor is left for another account'
}

/** Whether a script's reply is a refusal for room. */
export const isRefusal = (reply: unknown): reply is Refusal => typeof reply === 'string' && Object.hasOwn(REFUSALS, reply)

/** A script's refusal as the error the store rejects with. */
export const refusal = (refused: Refusal): StoreFullError => new StoreFullError(REFUSALS[refused], refused)

/** What the user script answers for a registration the pace holds back: the ms to wait. */
export const paced = (waitMs: number): RegistrationPacedError => new RegistrationPacedError(waitMs)

/**
 * Sets the deployment's bounds in Redis, where every instance's scripts read them: the last instance to start sets
 * them for all. Without a budget, two thirds of Redis's maxmemory (the rest is for sessions, limits and deliveries);
 * undefined when Redis has no maxmemory, or will not say: then nothing bounds the store but Redis itself.
 */
export async function setCapacity (redis: Redis, keys: RedisKeys, settings: CapacitySettings): Promise<number | undefined> {
  let budgetBytes = settings.budgetBytes
  if (budgetBytes === undefined) {
    const [, maxmemory = '0'] = await redis.config('GET', 'maxmemory').catch(() => []) as string[]
    budgetBytes = Number(maxmemory) > 0 ? Math.floor(Number(maxmemory) * 2 / 3) : undefined
  }
  const bounds: CapacityBounds = { ...settings, budgetBytes: budgetBytes ?? Infinity }
  const bounded = (bytes: number): number => Math.min(bytes, UNBOUNDED_BYTES)
  await call(redis.hset(keys.capacity, 'budget', bounded(bounds.budgetBytes), 'floor', bounds.floorBytes, 'ceiling', bounded(bounds.ceilingBytes),
    'sessions', bounded(bounds.sessionsBytes), 'floorsKept', bounded(floorsKept(bounds)), 'sharedPart', bounded(sharedPart(bounds)),
    'room', bounds.registrationRoomMs ?? 0))
  return budgetBytes
}

export async function readCapacity (redis: Redis, keys: RedisKeys): Promise<CapacityReading> {
  const [budget, held, floorsKeptBytes, floors, shared, accounts] = await call(redis.hmget(keys.capacity, 'budget', 'held', 'floorsKept', 'floors', 'shared', 'accounts'))
  const unbounded = (figure: string | null | undefined): number => figure == null || Number(figure) >= UNBOUNDED_BYTES ? Infinity : Number(figure)
  return {
    budgetBytes: unbounded(budget),
    heldBytes: Number(held ?? 0),
    floorsKeptBytes: unbounded(floorsKeptBytes),
    floorsBytes: Number(floors ?? 0),
    sharedUsedBytes: Number(shared ?? 0),
    accounts: Number(accounts ?? 0)
  }
}
