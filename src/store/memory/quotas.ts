import type { AccountBounds } from '../../domain/quotas.js'
import type { StoreUsage } from '../store.js'

/**
 * The bytes each account of the memory store keeps against its quota (src/domain/quotas.ts): every part of the store
 * that keeps a text for an account counts it here before it keeps it, and gives it back when it lets it go.
 */
export class MemoryQuotas {
  readonly bounds: AccountBounds
  readonly #held = new Map<string, number>()
  #heldBytes = 0

  constructor (bounds: AccountBounds) {
    this.bounds = bounds
  }

  /** What the account keeps against its quota. */
  heldBy (accountId: string): number {
    return this.#held.get(accountId) ?? 0
  }

  /** Counts `bytes` more against the account (fewer when negative), which the caller made room for (`recordsForgotten`). */
  charge (accountId: string, bytes: number): void {
    const held = this.heldBy(accountId) + bytes
    if (held === 0) this.#held.delete(accountId)
    else this.#held.set(accountId, held)
    this.#heldBytes += bytes
  }

  refund (accountId: string, bytes: number): void {
    this.charge(accountId, -bytes)
  }

  usage (accounts: number): StoreUsage {
    return { accounts, heldBytes: this.#heldBytes }
  }
}
