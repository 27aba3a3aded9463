import type { Redis, Result } from 'ioredis'
import type { User } from '../../domain/index.js'
import type { AccountPage, AccountStore } from '../store.js'
import { call, type Script } from './commands.js'
import { Change, commit, retried, STALE } from './commit.js'
import { forgetUserKeys } from './idempotency-keys.js'
import type { RedisKeys } from './keys.js'
import { countBytes } from './quotas.js'
import type { RedisSessionStore } from './sessions.js'
import type { TrackedSessions } from './tracking.js'
import type { RedisUserStore } from './users.js'
import type { StoreWrites } from './writes.js'

export const accountScripts = {
  // KEYS: user order, users, account bytes, items owned, user emails. ARGV: the highest place listed ('+inf', or '('
  // and a place), how many, an email key ('' for every account). {ids, their places, then for each id: its user as
  // JSON, its bytes, its items}, in one step, so that every id listed has its user.
  listAccounts: {
    numberOfKeys: 5,
    lua: `
local listed = {}
if ARGV[3] == '' then
  listed = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
else
  local id = redis.call('HGET', KEYS[5], ARGV[3])
  local place = id and redis.call('ZSCORE', KEYS[1], id)
  if place and (ARGV[1] == '+inf' or tonumber(place) < tonumber(string.sub(ARGV[1], 2))) then listed = {id, place} end
end
local ids, places = {}, {}
for index = 1, #listed, 2 do
  ids[#ids + 1] = listed[index]
  places[#places + 1] = listed[index + 1]
end
if #ids == 0 then return {{}, {}, {}, {}, {}} end
return {ids, places, redis.call('HMGET', KEYS[2], unpack(ids)), redis.call('HMGET', KEYS[3], unpack(ids)), redis.call('HMGET', KEYS[4], unpack(ids))}`
  }
} as const satisfies Record<string, Script>

type Listed = Array<string | null>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    listAccounts (order: string, users: string, bytes: string, owned: string, emails: string, highest: string, count: number, emailKey: string
    ): Result<[ids: string[], places: string[], users: Listed, bytes: Listed, owned: Listed], Context>
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
  readonly #sessions: RedisSessionStore
  readonly #tracked: TrackedSessions
  readonly #quotaBytes: number

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys,
    { users, sessions, tracked, quotaBytes }: { users: RedisUserStore, sessions: RedisSessionStore, tracked: TrackedSessions, quotaBytes: number }) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#users = users
    this.#sessions = sessions
    this.#tracked = tracked
    this.#quotaBytes = quotaBytes
  }

  async list (before: number | undefined, limit: number, emailKey?: string): Promise<AccountPage> {
    const keys = this.#keys
    // One more than the page, to tell whether another follows.
    const [ids, places, users, bytes, owned] = await call(this.#redis.listAccounts(keys.userOrder, keys.users, keys.accountBytes,
      keys.itemsOwned, keys.userEmails, before === undefined ? '+inf' : `(${before}`, limit + 1, emailKey ?? ''))
    // Number(null) is 0: an account that keeps nothing, or has no items.
    const accounts = ids.slice(0, limit).map((_id, index) =>
      ({ user: JSON.parse(users[index]!) as User, heldBytes: Number(bytes[index]), items: Number(owned[index]) }))
    return { accounts, next: ids.length > limit ? Number(places[limit - 1]) : undefined }
  }

  async remove (userId: string): Promise<boolean> {
    const keys = this.#keys
    const [removed, ended] = await retried(`account ${userId}`, async () => {
      const json = await call(this.#redis.hget(keys.users, userId))
      const user = json === null ? undefined : { json, emailKey: (JSON.parse(json) as User).emailKey }
      const change = new Change().guard(keys.users, userId, json)
      const [emailOwner, ended, released, held] = await Promise.all([user === undefined ? null : call(this.#redis.hget(keys.userEmails, user.emailKey)),
        this.#sessions.endAllIn(change, userId), forgetUserKeys(this.#redis, keys, change, userId), call(this.#redis.hget(keys.accountBytes, userId))])
      // Made only while the account keeps what was read: a key recorded meanwhile is forgotten with the others, read again.
      change.guard(keys.accountBytes, userId, held)
      if (user !== undefined) {
        change.guard(keys.userEmails, user.emailKey, emailOwner).write('HDEL', keys.users, userId).write('ZREM', keys.userOrder, userId)
          .count(keys.capacity, 'accounts', -1)
        if (emailOwner === userId) change.write('HDEL', keys.userEmails, user.emailKey)
      }
      countBytes(change, keys, userId, -released, this.#quotaBytes)
      return await commit(this.#redis, this.#writes, keys, change) === 1 ? [user !== undefined, ended] as const : STALE
    })
    if (ended.length > 0) this.#tracked.invalidate(ended)
    // A session opened between the read and the change: none can open now.
    if (removed) await this.#sessions.endAll(userId)
    this.#users.forget(userId)
    return removed
  }
}
