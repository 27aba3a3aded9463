// The sizing rule, said once for every store: the worst case of everything the bounds let the service keep (every
// account full, every sandbox full, every rate-limit counter and webhook delivery its bound allows) must fit the
// store's budget. A store says what each thing costs it (`StoreCosts`); the start checks the rule and says its
// figures (src/plugins/app/store.ts). Pure: the bounds and the costs in, the figures out.
import type { AccountBounds } from './quotas.js'

/** What one store holds, in bytes as it holds them, for each thing the bounds count. */
export interface StoreCosts {
  /** Per byte of an account's quota (a text, and what indexes it, at the smallest item the contract makes). */
  readonly perQuotaByte: number
  /** An account's user. */
  readonly perAccount: number
  /** An idempotency key beside its record's text: its name, its entries, its places. */
  readonly perKey: number
  /** A session beside its refresh-token hashes, and each hash. */
  readonly perSession: number
  readonly perTokenHash: number
  /** A rate-limit counter. */
  readonly perRateLimitKey: number
  /** Per byte of an event kept for reading back or delivery (UTF-8). */
  readonly perEventByte: number
}

/** The bounds the rule reads: the accounts' and their counts, the sandboxes', the counters' and the webhooks'. */
export interface SizingBounds {
  readonly accounts: AccountBounds
  readonly keysPerAccount: number
  readonly sessionsPerAccount: number
  readonly tokenHashesPerSession: number
  /** Off: undefined. Each sandbox's accounts within the service's quota and counts. */
  readonly sandboxes: { readonly limit: number, readonly accounts: number, readonly eventBytes: number, readonly rateLimitKeys: number } | undefined
  /** Rate-limit counters the service keeps at most, every limit's together. */
  readonly rateLimitKeys: number
  /** Bytes of events the webhook subscribers' deliveries and dead letters keep at most, every subscriber's together. */
  readonly deliveryBytes: number
}

export interface Sizing {
  /** One account at its worst. */
  readonly accountBytes: number
  /** One sandbox at its worst (0 without sandboxes). */
  readonly sandboxBytes: number
  /** Everything at its worst. */
  readonly neededBytes: number
  /** What the store may hold (undefined: nothing bounds it but the store itself). */
  readonly budgetBytes: number | undefined
  /** Whether the worst case fits the budget. */
  readonly fits: boolean
  /** The most accounts that would fit, everything else as it is (0 when not even none would). */
  readonly accountsThatFit: number
}

export function sizing (bounds: SizingBounds, costs: StoreCosts, budgetBytes: number | undefined): Sizing {
  const accountBytes = Math.ceil(costs.perAccount + bounds.accounts.quotaBytes * costs.perQuotaByte + bounds.keysPerAccount * costs.perKey +
    bounds.sessionsPerAccount * (costs.perSession + bounds.tokenHashesPerSession * costs.perTokenHash))
  const { sandboxes } = bounds
  const sandboxBytes = sandboxes === undefined
    ? 0
    : sandboxes.accounts * accountBytes + Math.ceil(sandboxes.eventBytes * costs.perEventByte) + sandboxes.rateLimitKeys * costs.perRateLimitKey
  const besideAccounts = (sandboxes?.limit ?? 0) * sandboxBytes + bounds.rateLimitKeys * costs.perRateLimitKey + Math.ceil(bounds.deliveryBytes * costs.perEventByte)
  const neededBytes = bounds.accounts.accounts * accountBytes + besideAccounts
  return {
    accountBytes,
    sandboxBytes,
    neededBytes,
    budgetBytes,
    fits: budgetBytes === undefined || neededBytes <= budgetBytes,
    accountsThatFit: budgetBytes === undefined ? Infinity : Math.max(0, Math.floor((budgetBytes - besideAccounts) / accountBytes))
  }
}
