import type { AccountPage, AccountStore } from '../store.js'
import type { MemoryIdempotencyKeys } from './idempotency-keys.js'
import type { MemoryItemStore } from './items.js'
import type { MemoryQuotas } from './quotas.js'
import type { MemorySessionStore } from './sessions.js'
import type { MemoryUserStore } from './users.js'

/** The memory store's accounts, from the parts that keep what each holds. */
export class MemoryAccounts implements AccountStore {
  constructor (
    readonly users: MemoryUserStore,
    readonly sessions: MemorySessionStore,
    readonly idempotencyKeys: MemoryIdempotencyKeys,
    readonly items: MemoryItemStore,
    readonly quotas: MemoryQuotas
  ) {}

  async list (before: number | undefined, limit: number, emailKey?: string): Promise<AccountPage> {
    // One more than the page, to tell whether another follows.
    const listed = emailKey === undefined ? this.users.newestFirst(before, limit + 1) : this.users.placedByEmailKey(emailKey, before)
    const page = listed.slice(0, limit)
    return {
      accounts: page.map(({ user }) => ({ user, heldBytes: this.quotas.heldBy(user.id), items: this.items.ownedBy(user.id) })),
      next: listed.length > limit ? page.at(-1)!.position : undefined
    }
  }

  async remove (userId: string): Promise<boolean> {
    this.sessions.endAll(userId)
    this.idempotencyKeys.forgetAll(userId)
    return this.users.delete(userId)
  }
}
