import type { Redis, Result } from 'ioredis'
import { FifoMap } from 'toad-cache'
import type { User } from '../../domain/index.js'
import { admission, registrationWait } from '../capacity.js'
import { IdTakenError, RegistrationPacedError, type UserStore } from '../store.js'
import { isRefusal, readPace, refusal, userBytes } from './capacity.js'
import { call, type Script } from './commands.js'
import { Change, commit, retried, STALE } from './commit.js'
import type { RedisKeys } from './keys.js'
import type { StoreWrites } from './writes.js'

// What a registration's commit answers when the email, or the id, is another user's.
const EMAIL_TAKEN = 2
const ID_TAKEN = 3

export const userScripts = {
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
    const keys = this.#keys
    const json = JSON.stringify(user)
    const added = await retried(`user ${user.id}`, async () => {
      const [reading, emailTaken, idTaken] = await Promise.all([readPace(this.#redis, keys), call(this.#redis.hexists(keys.userEmails, user.emailKey)),
        call(this.#redis.hexists(keys.users, user.id))])
      if (emailTaken === 1) return EMAIL_TAKEN
      if (idTaken === 1) return ID_TAKEN
      const admitted = admission(reading, this.#now())
      if (admitted === 'registration') return admitted
      if (typeof admitted === 'number') throw new RegistrationPacedError(admitted)
      const change = new Change().guard(keys.userEmails, user.emailKey, null, EMAIL_TAKEN).guard(keys.users, user.id, null, ID_TAKEN)
      if (admitted.pace !== undefined) {
        // A bucket counted from the one read is written only while it is as read; a full one whatever it is.
        if (admitted.paced) change.guard(keys.capacity, 'paceTokens', reading.bucket[0]).guard(keys.capacity, 'paceAt', reading.bucket[1])
        change.write('HSET', keys.capacity, 'paceTokens', String(admitted.pace.tokens), 'paceAt', String(admitted.pace.at))
      }
      change.write('HSET', keys.users, user.id, json).write('HSET', keys.userEmails, user.emailKey, user.id).write('INCR', keys.userSequence)
      change.write('ZADD', keys.userOrder, change.answerOfLast(), user.id)
        .chargeAccount(keys, user.id, userBytes(user.id, user.emailKey, json), { admittingFloor: reading.floorBytes })
      const outcome = await commit(this.#redis, this.#writes, keys, change)
      return outcome === 0 ? STALE : outcome
    })
    if (added === ID_TAKEN) throw new IdTakenError(`user ${user.id} exists already`)
    if (isRefusal(added)) throw refusal(added)
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
    return registrationWait(await readPace(this.#redis, this.#keys), this.#now())
  }

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }

  /** Drops this instance's copy of a user removed (another instance's stays, used by no session: they ended with it). */
  forget (id: string): void {
    this.#byId.delete(id)
  }
}
