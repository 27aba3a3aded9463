import { type AccountBounds, UNBOUNDED_ACCOUNTS } from '../../domain/quotas.js'
import type { StoreCosts } from '../../domain/sizing.js'
import { IDEMPOTENCY_KEY_DEFAULTS, type IdempotencyKeyBounds, KEYS_PER_RATE_LIMIT, PENDING_DELIVERIES, PENDING_DELIVERY_BYTES } from '../../domain/bounds.js'
import type { OutboxBounds } from '../outbox.js'
import type { Store } from '../store.js'
import { MemoryAccounts } from './accounts.js'
import { MemoryIdempotencyKeys } from './idempotency-keys.js'
import { MemoryItemStore } from './items.js'
import { MemoryOutbox } from './outbox.js'
import { MemoryQuotas } from './quotas.js'
import { MemoryRateCounter } from './rate-counter.js'
import { MemorySessionStore } from './sessions.js'
import { MemoryUserStore } from './users.js'

export interface MemoryStoreOptions {
  /** Items one contributor may own at once; unbounded when left out. */
  maxItemsPerContributor?: number
  /** What the outbox keeps per subscriber; past either bound, new events are dropped for it. */
  pendingDeliveries?: OutboxBounds
  /** Client keys each rate limit keeps under its limit, and as many again over it. */
  keysPerRateLimit?: number
  /** How long a create made under an idempotency key is remembered, and how many keys each user keeps. */
  idempotencyKeys?: Partial<IdempotencyKeyBounds>
  /** How many accounts the store admits, and each one's quota (src/domain/quotas.ts); unbounded when left out. */
  accounts?: AccountBounds
  /** The store's clock (ms since the epoch), which everything it keeps is timed by; Date.now when left out. */
  clock?: () => number
}

export const MEMORY_OUTBOX_BOUNDS: OutboxBounds = { deliveries: PENDING_DELIVERIES, deliveryBytes: PENDING_DELIVERY_BYTES }

/**
 * What the memory store holds on V8's heap for each thing the sizing rule counts (src/domain/sizing.ts), upper bounds
 * of what `npm run bench:store` measures (docs/capacity.md): a text two bytes a character at worst, an item its
 * fields beside its text, a key its name and entries, a session and each token hash its entries in three maps.
 */
export const MEMORY_COSTS: StoreCosts = { perQuotaByte: 3, perAccount: 2048, perKey: 1024, perSession: 1792, perTokenHash: 192, perRateLimitKey: 320, perEventByte: 2 }

/** A memory store, whose outbox can forget a subscriber (a sandbox's receiver, once it is removed). */
export type MemoryStore = Store & { readonly outbox: MemoryOutbox }

/** The store of one process, the default: everything is lost when it ends, as the spec says. */
export function createMemoryStore ({
  maxItemsPerContributor = Infinity,
  pendingDeliveries = MEMORY_OUTBOX_BOUNDS,
  keysPerRateLimit = KEYS_PER_RATE_LIMIT,
  idempotencyKeys = {},
  accounts: bounds = UNBOUNDED_ACCOUNTS,
  clock = () => Date.now()
}: MemoryStoreOptions = {}): MemoryStore {
  const quotas = new MemoryQuotas(bounds)
  const rateCounters = new Map<string, MemoryRateCounter>()
  const outbox = new MemoryOutbox(pendingDeliveries)
  const rateCounter = (name: string): MemoryRateCounter => {
    const counter = rateCounters.get(name) ?? new MemoryRateCounter(keysPerRateLimit, clock)
    rateCounters.set(name, counter)
    return counter
  }
  const keys = new MemoryIdempotencyKeys({ ...IDEMPOTENCY_KEY_DEFAULTS, ...idempotencyKeys }, quotas, clock)
  const users = new MemoryUserStore(bounds.accounts)
  const sessions = new MemorySessionStore(users, clock)
  const items = new MemoryItemStore(maxItemsPerContributor, outbox, keys, quotas, users, rateCounter)
  let open = true
  return {
    users,
    sessions,
    items,
    idempotencyKeys: keys,
    accounts: new MemoryAccounts(users, sessions, keys, items, quotas),
    outbox,
    rateCounter,
    usage: async () => quotas.usage(users.count),
    available: () => open,
    now: clock,
    close: async () => { open = false }
  }
}
