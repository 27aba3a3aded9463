import type { Redis, Result } from 'ioredis'
import type { User } from '../../domain/index.js'
import type { AccountPage, AccountStore } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import type { RedisKeys } from './keys.js'
import type { TrackedSessions } from './tracking.js'
import type { RedisUserStore } from './users.js'
import { type StoreWrites, writeScript } from './writes.js'

// Defined in removeAccount, after CAPACITY: ARGV[1..3] are the prefixes of the session, refresh-token and
// user-sessions keys (keys.ts), for the keys the script finds in what it reads. `forget` forgets a session: its
// refresh tokens, its record, its place among its user's sessions, its charge; and lists it in `ended`, which the
// script answers (space-separated) for the instance to drop its copies at once, before Redis's invalidation reaches
// it. (The session rules themselves are src/store/sessions.ts; this is the layout of sessions.ts's Change.)
const FORGET_SESSION = `
local families = {session = ARGV[1], refreshToken = ARGV[2], userSessions = ARGV[3]}
local ended = {}
local function forget (sessionId)
  local sessionKey = families.session .. sessionId
  local fields = redis.call('HMGET', sessionKey, 'user', 'current', 'previous', 'replaced')
  releaseCharge(sessionKey)
  if not fields[1] then return end
  ended[#ended + 1] = sessionId
  for i = 2, 4 do
    for hash in string.gmatch(fields[i], '%S+') do redis.call('DEL', families.refreshToken .. hash) end
  end
  redis.call('DEL', sessionKey)
  redis.call('ZREM', families.userSessions .. fields[1], sessionId)
end
`

/** The key prefixes FORGET_SESSION takes. */
type SessionFamilies = [session: string, refreshToken: string, userSessions: string]

export const accountScripts = {
  // KEYS: user order, users, account bytes, account session bytes, items owned, user emails. ARGV: the highest place
  // listed ('+inf', or '(' and a place), how many, an email key ('' for every account). {ids, their places, then for
  // each id: its user as JSON, its bytes, its sessions' bytes, its items}, in one step, so that every id listed has
  // its user.
  listAccounts: {
    numberOfKeys: 6,
    lua: `
local listed = {}
if ARGV[3] == '' then
  listed = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
else
  local id = redis.call('HGET', KEYS[6], ARGV[3])
  local place = id and redis.call('ZSCORE', KEYS[1], id)
  if place and (ARGV[1] == '+inf' or tonumber(place) < tonumber(string.sub(ARGV[1], 2))) then listed = {id, place} end
end
local ids, places = {}, {}
for index = 1, #listed, 2 do
  ids[#ids + 1] = listed[index]
  places[#places + 1] = listed[index + 1]
end
if #ids == 0 then return {{}, {}, {}, {}, {}, {}} end
return {ids, places, redis.call('HMGET', KEYS[2], unpack(ids)), redis.call('HMGET', KEYS[3], unpack(ids)), redis.call('HMGET', KEYS[4], unpack(ids)),
  redis.call('HMGET', KEYS[5], unpack(ids))}`
  },
  // KEYS: users, user emails, user order, the user's sessions (userSessions), the user's recorded idempotency keys
  // (idempotencyKeys), the capacity keys (CAPACITY). ARGV: (FORGET_SESSION), the user id, its email key (read by the
  // service: no script parses what a user wrote). Ends the user's sessions, forgets its recorded keys, removes the
  // user and gives its record's charge and its floor back. {1 when there was a user, 0 when not; the sessions ended}.
  removeAccount: {
    numberOfKeys: 5 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY + FORGET_SESSION, `
capacityAt(6)
local userId, emailKey = ARGV[4], ARGV[5]
for _, sessionId in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do forget(sessionId) end
redis.call('DEL', KEYS[4])
for _, name in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  redis.call('DEL', name)
  releaseCharge(name)
end
redis.call('DEL', KEYS[5])
local json = redis.call('HGET', KEYS[1], userId)
if not json then return {0, table.concat(ended, ' ')} end
if redis.call('HGET', KEYS[2], emailKey) == userId then redis.call('HDEL', KEYS[2], emailKey) end
redis.call('HDEL', KEYS[1], userId)
redis.call('ZREM', KEYS[3], userId)
releaseFloor(userId)
charge(userId, -userBytes(userId, emailKey, json))
return {1, table.concat(ended, ' ')}`)
  }
} as const satisfies Record<string, Script>

type Listed = Array<string | null>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    listAccounts (order: string, users: string, bytes: string, sessionBytes: string, owned: string, emails: string, highest: string, count: number, emailKey: string
    ): Result<[ids: string[], places: string[], users: Listed, bytes: Listed, sessionBytes: Listed, owned: Listed], Context>
    removeAccount (users: string, emails: string, order: string, userSessions: string, userKeys: string, ...args: [...CapacityKeys, deadline: WriteDeadline,
      outcomeKey: string, ...SessionFamilies, userId: string, emailKey: string]): Result<[0 | 1, string], Context>
  }
}

// Users put in the order of registration at a time, at a start that finds users without a place (those kept
// before the order was).
const USERS_ORDERED_PER_CALL = 1000

/**
 * Gives every user without a place in the order of registration one, by when it registered: the users a catalogue
 * kept before the order was, at the first start after. Checked at every start, and done only while the store holds
 * more users than places.
 */
export async function orderUsers (redis: Redis, keys: RedisKeys): Promise<void> {
  const [users, ordered] = await Promise.all([call(redis.hlen(keys.users)), call(redis.zcard(keys.userOrder))])
  if (users <= ordered) return
  const unordered: Array<{ id: string, createdAt: string }> = []
  let cursor = '0'
  do {
    const [next, fields] = await call(redis.hscan(keys.users, cursor, 'COUNT', USERS_ORDERED_PER_CALL))
    for (let index = 0; index < fields.length; index += 2) {
      const id = fields[index]!
      if (await call(redis.zscore(keys.userOrder, id)) === null) unordered.push({ id, createdAt: (JSON.parse(fields[index + 1]!) as User).createdAt })
    }
    cursor = next
  } while (cursor !== '0')
  unordered.sort((a, b) => a.createdAt.localeCompare(b.createdAt))
  for (const { id } of unordered) await call(redis.zadd(keys.userOrder, 'NX', await call(redis.incr(keys.userSequence)), id))
}

/** Accounts on Redis, shared by every instance. */
export class RedisAccounts implements AccountStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #users: RedisUserStore
  readonly #sessions: TrackedSessions

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, users: RedisUserStore, sessions: TrackedSessions) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#users = users
    this.#sessions = sessions
  }

  async list (before: number | undefined, limit: number, emailKey?: string): Promise<AccountPage> {
    const keys = this.#keys
    // One more than the page, to tell whether another follows.
    const [ids, places, users, bytes, sessions, owned] = await call(this.#redis.listAccounts(keys.userOrder, keys.users, keys.accountBytes,
      keys.accountSessionBytes, keys.itemsOwned, keys.userEmails, before === undefined ? '+inf' : `(${before}`, limit + 1, emailKey ?? ''))
    // Number(null) is 0: an account with no sessions, or no items.
    const accounts = ids.slice(0, limit).map((_id, index) =>
      ({ user: JSON.parse(users[index]!) as User, heldBytes: Number(bytes[index]) + Number(sessions[index]), items: Number(owned[index]) }))
    return { accounts, next: ids.length > limit ? Number(places[limit - 1]) : undefined }
  }

  async remove (userId: string): Promise<boolean> {
    const keys = this.#keys
    const user = await this.#users.get(userId)
    const [removed, ended] = await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.removeAccount(keys.users, keys.userEmails, keys.userOrder,
      keys.userSessions + userId, keys.idempotencyKeys + userId, ...capacityKeys(keys), deadline, outcomeKey, keys.session, keys.refreshToken, keys.userSessions,
      userId, user?.emailKey ?? ''))
    if (ended !== '') this.#sessions.invalidate(ended.split(' '))
    this.#users.forget(userId)
    return removed === 1
  }
}
