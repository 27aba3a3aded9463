import type { User } from '../../domain.js'
import { IdTakenError, StoreFullError, type UserStore } from '../store.js'

export class MemoryUserStore implements UserStore {
  readonly #maxUsers: number
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()

  constructor (maxUsers: number) {
    this.#maxUsers = maxUsers
  }

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    if (this.#byId.has(user.id)) throw new IdTakenError(`user ${user.id} exists already`)
    if (this.#byId.size >= this.#maxUsers) throw new StoreFullError(`the store holds ${this.#maxUsers} users, as many as it may`)
    const stored = Object.freeze({ ...user })
    this.#byId.set(stored.id, stored)
    this.#byEmailKey.set(stored.emailKey, stored)
    return stored
  }

  async get (id: string): Promise<User | undefined> {
    return this.cached(id)
  }

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }

  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    return this.#byEmailKey.get(emailKey)
  }
}
