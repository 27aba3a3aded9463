import type { User } from '../../domain.js'
import { IdTakenError, type UserStore } from '../store.js'
import { type MemoryCapacity, userBytes } from './capacity.js'

export class MemoryUserStore implements UserStore {
  readonly #capacity: MemoryCapacity
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()

  constructor (capacity: MemoryCapacity) {
    this.#capacity = capacity
  }

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    if (this.#byId.has(user.id)) throw new IdTakenError(`user ${user.id} exists already`)
    const stored = Object.freeze({ ...user })
    this.#capacity.admit(stored.id, userBytes(stored))
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
