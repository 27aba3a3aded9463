import type { User } from '../../domain/index.js'
import { IdTakenError, StoreFullError, type UserStore } from '../store.js'

export class MemoryUserStore implements UserStore {
  readonly #maxAccounts: number
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()
  // Each user's place in the order of registration (the accounts' pages), and the places, in that order.
  readonly #positions = new Map<string, number>()
  readonly #order: Array<{ readonly position: number, readonly id: string }> = []
  #lastPosition = 0

  constructor (maxAccounts: number) {
    this.#maxAccounts = maxAccounts
  }

  /** How many users (accounts) it holds. */
  get count (): number {
    return this.#byId.size
  }

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    if (this.#byId.has(user.id)) throw new IdTakenError(`user ${user.id} exists already`)
    if (this.#byId.size >= this.#maxAccounts) throw new StoreFullError(this.#maxAccounts)
    const stored = Object.freeze({ ...user })
    this.#byId.set(stored.id, stored)
    this.#byEmailKey.set(stored.emailKey, stored)
    this.#lastPosition += 1
    this.#positions.set(stored.id, this.#lastPosition)
    this.#order.push({ position: this.#lastPosition, id: stored.id })
    return stored
  }

  /** The users registered before `before` (all when undefined), newest first, at most `limit`, with their places. */
  newestFirst (before: number | undefined, limit: number): Array<{ position: number, user: User }> {
    // The order is by place: the first place at or past `before` is found by halving.
    let end = this.#order.length
    if (before !== undefined) {
      let low = 0
      while (low < end) {
        const middle = (low + end) >>> 1
        if (this.#order[middle]!.position < before) low = middle + 1
        else end = middle
      }
    }
    return this.#order.slice(Math.max(0, end - limit), end).reverse().map(({ position, id }) => ({ position, user: this.#byId.get(id)! }))
  }

  /** The user of `emailKey` with its place, as `newestFirst` lists it, when there is one placed before `before`. */
  placedByEmailKey (emailKey: string, before: number | undefined): Array<{ position: number, user: User }> {
    const user = this.#byEmailKey.get(emailKey)
    const position = user === undefined ? undefined : this.#positions.get(user.id)
    if (user === undefined || position === undefined || (before !== undefined && position >= before)) return []
    return [{ position, user }]
  }

  /** Forgets the user; false when there was none. */
  delete (id: string): boolean {
    const user = this.#byId.get(id)
    if (user === undefined) return false
    this.#byId.delete(id)
    this.#byEmailKey.delete(user.emailKey)
    const position = this.#positions.get(id)!
    this.#positions.delete(id)
    this.#order.splice(this.#order.findIndex((entry) => entry.position === position), 1)
    return true
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
