import type { Redis } from 'ioredis'
import { FifoMap } from 'toad-cache'
import type { User } from '../../domain/index.js'
import { IdTakenError, StoreFullError, type UserStore } from '../store.js'
import { call } from './commands.js'
import { Change, commit } from './commit.js'
import type { RedisKeys } from './keys.js'
import type { StoreWrites } from './writes.js'

// What a registration's commit answers when the email, or the id, is another user's, or the store holds as many
// accounts as it admits.
const EMAIL_TAKEN = 2
const ID_TAKEN = 3
const ACCOUNTS_FULL = 4

// Stored as the service wrote them; handed out frozen, as the memory store's are.
const parseUser = (json: string): User => Object.freeze(JSON.parse(json) as User)

/**
 * Users are never changed once added, so each instance keeps the ones it has read (the oldest out first):
 * authentication reads the caller's user on every request, and this spares it a round trip. A user removed (with its
 * account) ends its sessions with it, and authentication reads the session first.
 */
export class RedisUserStore implements UserStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #byId: FifoMap<User>
  readonly #maxAccounts: number

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, maxCached: number, maxAccounts: number) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#byId = new FifoMap(maxCached)
    this.#maxAccounts = maxAccounts
  }

  async add (user: User): Promise<User | undefined> {
    const keys = this.#keys
    const json = JSON.stringify(user)
    const change = new Change().guard(keys.userEmails, user.emailKey, null, EMAIL_TAKEN).guard(keys.users, user.id, null, ID_TAKEN)
      .count(keys.capacity, 'accounts', 1, this.#maxAccounts, ACCOUNTS_FULL)
    change.write('HSET', keys.users, user.id, json).write('HSET', keys.userEmails, user.emailKey, user.id).write('INCR', keys.userSequence)
    change.write('ZADD', keys.userOrder, change.answerOfLast(), user.id)
    // Every guard names its refusal: none is a stale read.
    const added = await commit(this.#redis, this.#writes, keys, change)
    if (added === ID_TAKEN) throw new IdTakenError(`user ${user.id} exists already`)
    if (added === ACCOUNTS_FULL) throw new StoreFullError(this.#maxAccounts)
    return added === 1 ? parseUser(json) : undefined
  }

  async get (id: string): Promise<User | undefined> {
    const cached = this.cached(id)
    if (cached !== undefined) return cached
    const json = await call(this.#redis.hget(this.#keys.users, id))
    if (json === null) return undefined
    const user = parseUser(json)
    this.#byId.set(id, user)
    return user
  }

  // Read from Redis, not from this instance's copies, which may hold a user removed since: sign-in must not find one.
  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    const id = await call(this.#redis.hget(this.#keys.userEmails, emailKey))
    const json = id === null ? null : await call(this.#redis.hget(this.#keys.users, id))
    return json === null ? undefined : parseUser(json)
  }

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }

  /** Drops this instance's copy of a user removed (another instance's stays, used by no session: they ended with it). */
  forget (id: string): void {
    this.#byId.delete(id)
  }
}
