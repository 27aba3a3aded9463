import type { AccountPage, AccountStore } from '../store.js'
import type { MemoryCapacity } from './capacity.js'
import type { MemoryIdempotencyKeys } from './idempotency-keys.js'
import type { MemoryItemStore } from './items.js'
import type { MemorySessionStore } from './sessions.js'
import type { MemoryUserStore } from './users.js'

/** The memory store's accounts, from the parts that keep what each holds. */
export class MemoryAccounts implements AccountStore {
  constructor (
    readonly users: MemoryUserStore,
    readonly sessions: MemorySessionStore,
    readonly idempotencyKeys: MemoryIdempotencyKeys,
    readonly items: MemoryItemStore,
    readonly capacity: MemoryCapacity
  ) {}

  async list (before: number | undefined, limit: number, emailKey?: string): Promise<AccountPage> {
    // One more than the page, to tell whether another follows.
    const listed = emailKey === undefined ? this.users.newestFirst(before, limit + 1) : this.users.placedByEmailKey(emailKey, before)
    const page = listed.slice(0, limit)
    return {
      accounts: page.map(({ user }) => ({ user, heldBytes: this.capacity.heldBy(user.id), items: this.items.ownedBy(user.id) })),
      next: listed.length > limit ? page.at(-1)!.position : undefined
    }
  }

  async remove (userId: string): Promise<boolean> {
    this.sessions.endAll(userId)
    this.idempotencyKeys.forgetAll(userId)
    const removed = this.users.delete(userId)
    this.capacity.release(userId)
    return removed
  }
}
