import type { Redis, Result } from 'ioredis'
import { type CapacityBounds, type CapacityReading, type CapacitySettings, floorsKept, type PaceReading, sharedPart } from '../capacity.js'
import { EXPIRED_CHARGES_PER_WRITE } from '../rules.js'
import { type RoomLimit, StoreFullError } from '../store.js'
import { randomUuid } from '../../runtime/uuid.js'
import { call, type Script } from './commands.js'
import type { RedisKeys } from './keys.js'

// A budget for the deployment that no store reaches: Lua reads it as a number, which Infinity is not.
const UNBOUNDED_BYTES = 2 ** 53

// Bytes Redis holds for a value, per byte of it: jemalloc's size classes round an allocation up by less than this.
const HELD_PER_BYTE = 1.25

/** Bytes Redis holds for a value of `length` bytes (CAPACITY's `stored`). */
export const storedBytes = (length: number): number => Math.ceil(length * HELD_PER_BYTE)

// An item's entries beside its text: its id in itemOrder and its three sets (keys.ts).
const ITEM_ENTRIES_BYTES = 1024

/** What an item of the text `json` is charged. */
export const itemBytes = (json: string): number => storedBytes(Buffer.byteLength(json)) + ITEM_ENTRIES_BYTES

// An idempotency key's entries beside its name and value: in its user's keys, in capacity-charges and -expiries.
const KEY_ENTRIES_BYTES = 512

/** What an idempotency key `name` holding `value` is charged. */
export const keyBytes = (name: string, value: string): number => storedBytes(4 * Buffer.byteLength(name) + Buffer.byteLength(value)) + KEY_ENTRIES_BYTES

// A user's entries beside its record and its email key: its id in the order of registration and the capacity hashes.
const USER_ENTRIES_BYTES = 512

/** What the user `id` is charged: its record `json` and its `emailKey`, each in a hash. */
export const userBytes = (id: string, emailKey: string, json: string): number =>
  storedBytes(Buffer.byteLength(json) + Buffer.byteLength(emailKey) + 3 * Buffer.byteLength(id)) + USER_ENTRIES_BYTES

/** Lua that fails a script whose bounds for accounts are missing from the capacity totals. */
export const NO_BOUNDS = "error({err = 'NOBOUNDS the bounds for accounts are not set (Redis came back empty); nothing was changed'})"

/**
 * The ledger of src/store/capacity.ts in Lua, for the write scripts that keep what an account causes: each passes
 * the five keys of `capacityKeys` from KEYS[index] on and calls `capacityAt(index)` first. Bytes are reckoned as
 * Redis holds them, conservatively: a value's bytes and a quarter more (jemalloc's size classes round an allocation
 * up by less), and a fixed allowance for the entries that index it (docs/security.md, "Room for each account").
 *
 * - `charge(account, bytes, unrefused)`: false once charged (a refund, when negative, always is, and so is a charge
 *   `unrefused`, a claim's); 'account' past the account's ceiling, 'shared' when it would need more of the shared
 *   part than is left; refused, nothing changes. A refund past what was charged counts the rest in the totals'
 *   `drift` (the commit of src/store/redis/commit.ts counts an item's kept before charges apart, as `uncharged`).
 * - `admit(account, bytes)`: reserves the account's floor and charges it; 'registration' when no floor is left.
 * - `chargeOf(name)`: the account, bytes and kind of the charge of the key `name` (an idempotency key or a session,
 *   which Redis expires); `releaseCharge(name)` gives it back before.
 * - `releaseExpired(now, limit)`: gives back, `limit` at a time (EXPIRED_CHARGES_PER_WRITE when left out), the
 *   charges of keys Redis has expired: how many.
 */
export const CAPACITY = `
local capacity
local UNBOUNDED = '${UNBOUNDED_BYTES}'
-- The bounds and sums the charges read, once a script (capacityAt), and the ledger entries of the accounts it has
-- read (accountOf): every change of them in the script goes through the functions below, which keep both as Redis
-- has them.
local totals
local accounts = {}
-- Bounds are read from the totals, which setCapacity fills at every start: a Redis come back empty (restarted
-- without persistence, or flushed) has none, and no write is made unbounded before an instance sets them again.
local function capacityAt (index)
  capacity = {totals = KEYS[index], bytes = KEYS[index + 1], floors = KEYS[index + 2], charges = KEYS[index + 3], expiries = KEYS[index + 4],
    sessions = KEYS[index + 5]}
  local read = redis.call('HMGET', capacity.totals, 'ceiling', 'sharedPart', 'shared', 'sessions', 'held')
  if not read[1] then
    ${NO_BOUNDS}
  end
  totals = {ceiling = tonumber(read[1]), sharedPart = tonumber(read[2]), shared = tonumber(read[3] or '0'), sessions = tonumber(read[4]),
    held = tonumber(read[5] or '0')}
end
-- What the account is charged beside its sessions, and its floor.
local function accountOf (account)
  local entry = accounts[account]
  if not entry then
    entry = {held = tonumber(redis.call('HGET', capacity.bytes, account) or '0'), floor = tonumber(redis.call('HGET', capacity.floors, account) or '0')}
    accounts[account] = entry
  end
  return entry
end
-- Why charging the account \`bytes\` would be refused ('account' past its ceiling, 'shared' when it would need more
-- of the shared part than is left), or false; and, either way, what it and the shared part would then hold. The
-- account's floor holds its sessions' part, which charge() never draws on: only the rest of it counts here.
local function chargeRefused (account, bytes)
  local entry = accountOf(account)
  local besideSessions = math.max(0, entry.floor - totals.sessions)
  local nextHeld = entry.held + bytes
  local nextShared = totals.shared + math.max(0, nextHeld - besideSessions) - math.max(0, entry.held - besideSessions)
  local refused = false
  if bytes > 0 and nextHeld > totals.ceiling then refused = 'account'
  elseif bytes > 0 and nextShared > totals.shared and nextShared > totals.sharedPart then refused = 'shared' end
  return refused, nextHeld, nextShared, entry
end
-- \`unrefused\`: whatever the account's room (a claim: MemoryCapacity.hold says why).
local function charge (account, bytes, unrefused)
  local held = accountOf(account).held
  -- A refund is given back only as far as the account was charged; what is missing is a drift of the ledger.
  if held + bytes < 0 then
    redis.call('HINCRBY', capacity.totals, 'drift', -(held + bytes))
    -- Not -held: Lua writes a negative zero as "-0", which HINCRBY refuses.
    bytes = 0 - held
  end
  local refused, nextHeld, nextShared, entry = chargeRefused(account, bytes)
  if refused and not unrefused then return refused end
  if nextHeld == 0 and entry.floor == 0 then redis.call('HDEL', capacity.bytes, account) else redis.call('HSET', capacity.bytes, account, nextHeld) end
  redis.call('HSET', capacity.totals, 'held', totals.held + bytes, 'shared', nextShared)
  entry.held, totals.held, totals.shared = nextHeld, totals.held + bytes, nextShared
  return false
end
-- 'registration' when no floor is left (the admission of 1.1.0's accounts at a start, which is not paced; a
-- registration is admitted by its commit: users.ts).
local function admit (account, bytes)
  local read = redis.call('HMGET', capacity.totals, 'floor', 'floors', 'floorsKept')
  local floor, floors, kept = tonumber(read[1]), tonumber(read[2] or '0'), tonumber(read[3])
  if floor > 0 and math.floor((kept - floors) / floor) < 1 then return 'registration' end
  redis.call('HSET', capacity.floors, account, floor)
  redis.call('HINCRBY', capacity.totals, 'floors', floor)
  redis.call('HINCRBY', capacity.totals, 'accounts', 1)
  accountOf(account).floor = floor
  return charge(account, bytes)
end
local function chargeSessions (account, bytes)
  local held = tonumber(redis.call('HGET', capacity.sessions, account) or '0')
  if held + bytes < 0 then
    redis.call('HINCRBY', capacity.totals, 'drift', -(held + bytes))
    bytes = 0 - held
  end
  if held + bytes == 0 then redis.call('HDEL', capacity.sessions, account) else redis.call('HSET', capacity.sessions, account, held + bytes) end
  totals.held = totals.held + bytes
  redis.call('HSET', capacity.totals, 'held', totals.held)
end
-- A charge's entry: its account, its bytes, and its kind ('claim', 'session'; none for a record).
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
local function releaseExpired (now, limit)
  local expired = redis.call('ZRANGEBYSCORE', capacity.expiries, '-inf', now, 'LIMIT', 0, limit or ${EXPIRED_CHARGES_PER_WRITE})
  for _, name in ipairs(expired) do releaseCharge(name) end
  return #expired
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
  // KEYS: the capacity keys. ARGV: how many at most. Gives back the charges of keys Redis has expired: how many.
  releaseExpiredCharges: {
    numberOfKeys: CAPACITY_KEYS,
    lua: `${CAPACITY}
capacityAt(1)
local time = redis.call('TIME')
return releaseExpired(tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), tonumber(ARGV[1]))`
  },
  // KEYS: users, the capacity keys. ARGV: user ids, each followed by what it is charged. Admits each that is still
  // a user and has no floor (an account of 1.1.0, registered before floors were kept). How many could not be
  // admitted, no floor being left.
  admitAccounts: {
    numberOfKeys: 1 + CAPACITY_KEYS,
    lua: `${CAPACITY}
capacityAt(2)
local refused = 0
for index = 1, #ARGV, 2 do
  local id = ARGV[index]
  if redis.call('HEXISTS', KEYS[1], id) == 1 and redis.call('HEXISTS', capacity.floors, id) == 0 then
    if admit(id, tonumber(ARGV[index + 1])) then refused = refused + 1 end
  end
end
return refused`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    admitAccounts (users: string, ...args: [...CapacityKeys, ...idsAndBytes: Array<string | number>]): Result<number, Context>
    releaseExpiredCharges (...args: [...CapacityKeys, limit: number]): Result<number, Context>
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
    // A record charged as if its email key were as long as the record (it is part of it).
    const charged = fields.flatMap((field, index) => index % 2 === 0 ? [field, userBytes(field, fields[index + 1]!, fields[index + 1]!)] : [])
    if (charged.length > 0) refused += await call(redis.admitAccounts(keys.users, ...capacityKeys(keys), ...charged))
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
  // Items created before this, on a catalogue kept from before items were charged, never were.
  const [seconds] = await call(redis.time())
  await call(redis.hsetnx(keys.capacity, 'chargedSince', Number(seconds) * 1000))
  await call(redis.hset(keys.capacity, 'budget', bounded(bounds.budgetBytes), 'floor', bounds.floorBytes, 'ceiling', bounded(bounds.ceilingBytes),
    'sessions', bounded(bounds.sessionsBytes), 'floorsKept', bounded(floorsKept(bounds)), 'sharedPart', bounded(sharedPart(bounds)),
    'room', bounds.registrationRoomMs ?? 0))
  return budgetBytes
}

/**
 * The id of the data the bounds were set for, made by the first start on an empty Redis: one made again means
 * Redis lost the data and the bounds with it (a restart without persistence, a flush) since an instance last read it.
 */
export async function storeId (redis: Redis, keys: RedisKeys): Promise<string> {
  await call(redis.hsetnx(keys.capacity, 'storeId', randomUuid()))
  return String(await call(redis.hget(keys.capacity, 'storeId')))
}

/** The id `storeId` made, or null once Redis has lost it. */
export async function readStoreId (redis: Redis, keys: RedisKeys): Promise<string | null> {
  return await call(redis.hget(keys.capacity, 'storeId'))
}

// A bound as Redis keeps it: past UNBOUNDED_BYTES, or not set, none.
const unbounded = (figure: string | null | undefined): number => figure == null || Number(figure) >= UNBOUNDED_BYTES ? Infinity : Number(figure)

/** What the pace on registrations reads (src/store/capacity.ts), with its bucket's fields as Redis holds them. */
export interface RedisPaceReading extends PaceReading {
  readonly bucket: readonly [tokens: string | null, at: string | null]
}

export async function readPace (redis: Redis, keys: RedisKeys): Promise<RedisPaceReading> {
  const [floor, floors, floorsKeptBytes, room, paceTokens, paceAt] = await call(redis.hmget(keys.capacity, 'floor', 'floors', 'floorsKept', 'room', 'paceTokens', 'paceAt'))
  return {
    floorBytes: Number(floor ?? 0),
    floorsBytes: Number(floors ?? 0),
    floorsKeptBytes: unbounded(floorsKeptBytes),
    roomMs: Number(room ?? 0),
    pace: paceTokens == null ? undefined : { tokens: Number(paceTokens), at: Number(paceAt) },
    bucket: [paceTokens ?? null, paceAt ?? null]
  }
}

export async function readCapacity (redis: Redis, keys: RedisKeys): Promise<CapacityReading> {
  const [budget, held, floorsKeptBytes, floors, shared, accounts, drift] = await call(redis.hmget(keys.capacity, 'budget', 'held', 'floorsKept', 'floors', 'shared', 'accounts', 'drift'))
  return {
    budgetBytes: unbounded(budget),
    heldBytes: Number(held ?? 0),
    floorsKeptBytes: unbounded(floorsKeptBytes),
    floorsBytes: Number(floors ?? 0),
    sharedUsedBytes: Number(shared ?? 0),
    accounts: Number(accounts ?? 0),
    driftBytes: Number(drift ?? 0)
  }
}
