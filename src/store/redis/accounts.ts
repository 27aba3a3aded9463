import type { Redis } from 'ioredis'
import type { User } from '../../domain/index.js'
import type { AccountPage, AccountStore } from '../store.js'
import { call, scored, transaction } from './commands.js'
import { Change, commit, retried, STALE } from './commit.js'
import { forgetUserKeys } from './idempotency-keys.js'
import type { RedisKeys } from './keys.js'
import { countBytes } from './quotas.js'
import type { RedisSessionStore } from './sessions.js'
import type { TrackedSessions } from './tracking.js'
import type { RedisUserStore } from './users.js'
import type { StoreWrites } from './writes.js'

type Listed = Array<string | null>

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
    // One more than the page, to tell whether another follows: ids, each followed by its place.
    const listed = emailKey === undefined
      ? await call(this.#redis.zrevrangebyscore(keys.userOrder, before === undefined ? '+inf' : `(${before}`, '-inf', 'WITHSCORES', 'LIMIT', 0, limit + 1))
      : await this.#placeOf(emailKey, before)
    const placed = scored(listed)
    const page = placed.slice(0, limit).map(({ member }) => member)
    if (page.length === 0) return { accounts: [], next: undefined }
    const [users, bytes, owned] = await transaction(this.#redis.multi().hmget(keys.users, ...page).hmget(keys.accountBytes, ...page).hmget(keys.itemsOwned, ...page)) as [Listed, Listed, Listed]
    // An account removed since it was listed is left out. Number(null) is 0: an account that keeps nothing, or has no items.
    const accounts = page.map((_id, index) => ({ json: users[index], heldBytes: Number(bytes[index]), items: Number(owned[index]) }))
      .filter((account): account is { json: string, heldBytes: number, items: number } => typeof account.json === 'string')
      .map(({ json, ...account }) => ({ user: JSON.parse(json) as User, ...account }))
    return { accounts, next: placed.length > limit ? placed[limit - 1]!.score : undefined }
  }

  // The account of the email, with its place, when it is before `before`: [id, place], or none.
  async #placeOf (emailKey: string, before: number | undefined): Promise<string[]> {
    const id = await call(this.#redis.hget(this.#keys.userEmails, emailKey))
    const place = id === null ? null : await call(this.#redis.zscore(this.#keys.userOrder, id))
    return place !== null && (before === undefined || Number(place) < before) ? [id!, place] : []
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
