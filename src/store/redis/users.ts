import type { Redis, Result } from 'ioredis'
import { FifoMap } from 'toad-cache'
import type { User } from '../../domain/index.js'
import { IdTakenError, RegistrationPacedError, type UserStore } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys, isRefusal, readRegistrationWait, type Refusal, refusal, userBytes } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import type { RedisKeys } from './keys.js'
import { type StoreWrites, writeScript } from './writes.js'

export const userScripts = {
  // KEYS: users, user emails, user order, user sequence, the capacity keys (CAPACITY). ARGV: id, email key, user as
  // JSON, what the user is charged (userBytes). 1 when added, 0 when
  // the email key is taken, 2 when another user has the id, 'registration' when no floor is left for the account,
  // {5, ms} when the pace on registrations holds it back for that long.
  addUser: {
    numberOfKeys: 4 + CAPACITY_KEYS,
    lua: writeScript(CAPACITY, `
capacityAt(5)
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 0 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 2 end
local refused, wait = admit(ARGV[1], tonumber(ARGV[4]), now)
if refused == 'pace' then return {5, wait} end
if refused then return refused end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[1])
return 1`)
  },
  // KEYS: users, user emails. ARGV: email key. The user as JSON, or nil.
  findUserByEmailKey: {
    numberOfKeys: 2,
    lua: `
local id = redis.call('HGET', KEYS[2], ARGV[1])
if not id then return false end
return redis.call('HGET', KEYS[1], id)`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    addUser (users: string, emails: string, order: string, sequence: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string, id: string, emailKey: string, user: string, bytes: number]): Result<0 | 1 | 2 | Refusal | [5, number], Context>
    findUserByEmailKey (users: string, emails: string, emailKey: string): Result<string | null, Context>
  }
}

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
  readonly #now: () => number

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, maxCached: number, now: () => number) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#byId = new FifoMap(maxCached)
    this.#now = now
  }

  async add (user: User): Promise<User | undefined> {
    const json = JSON.stringify(user)
    const added = await this.#writes.run(async (deadline, outcomeKey) =>
      await this.#redis.addUser(this.#keys.users, this.#keys.userEmails, this.#keys.userOrder, this.#keys.userSequence, ...capacityKeys(this.#keys), deadline, outcomeKey, user.id, user.emailKey, json,
        userBytes(user.id, user.emailKey, json)))
    if (added === 2) throw new IdTakenError(`user ${user.id} exists already`)
    if (isRefusal(added)) throw refusal(added)
    if (Array.isArray(added)) throw new RegistrationPacedError(added[1])
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

  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    const json = await call(this.#redis.findUserByEmailKey(this.#keys.users, this.#keys.userEmails, emailKey))
    return json === null ? undefined : parseUser(json)
  }

  async registrationWait (): Promise<number> {
    return await readRegistrationWait(this.#redis, this.#keys, this.#now())
  }

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }

  /** Drops this instance's copy of a user removed (another instance's stays, used by no session: they ended with it). */
  forget (id: string): void {
    this.#byId.delete(id)
  }
}
