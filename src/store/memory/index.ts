import { IDEMPOTENCY_KEY_DEFAULTS, PENDING_DELIVERIES, PENDING_DELIVERY_BYTES } from '../rules.js'
import { type CapacityBounds, UNBOUNDED } from '../capacity.js'
import type { OutboxBounds } from '../outbox.js'
import type { Store } from '../store.js'
import { MemoryAccounts } from './accounts.js'
import { MemoryCapacity } from './capacity.js'
import { MemoryIdempotencyKeys, type MemoryIdempotencyKeyBounds } from './idempotency-keys.js'
import { MemoryItemStore } from './items.js'
import { MemoryOutbox } from './outbox.js'
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
  idempotencyKeys?: Partial<MemoryIdempotencyKeyBounds>
  /** The bytes the store keeps for its accounts, and how they are shared (src/store/capacity.ts); unbounded when left out. */
  capacity?: CapacityBounds
  /** The store's clock (ms since the epoch), which everything it keeps is timed by; Date.now when left out. */
  clock?: () => number
}

export const MEMORY_OUTBOX_BOUNDS: OutboxBounds = { deliveries: PENDING_DELIVERIES, deliveryBytes: PENDING_DELIVERY_BYTES }

// Keys each rate limit keeps, those under it and, as many again, those over it (which new keys cannot push out):
// about 300 bytes each with an email in the key, so at most 30 MB per limit.
const KEYS_PER_RATE_LIMIT = 50_000

/** A memory store, whose outbox can forget a subscriber (a sandbox's receiver, once it is removed). */
export type MemoryStore = Store & { readonly outbox: MemoryOutbox }

/** The store of one process, the default: everything is lost when it ends, as the spec says. */
export function createMemoryStore ({
  maxItemsPerContributor = Infinity,
  pendingDeliveries = MEMORY_OUTBOX_BOUNDS,
  keysPerRateLimit = KEYS_PER_RATE_LIMIT,
  idempotencyKeys = {},
  capacity: bounds = UNBOUNDED,
  clock = () => Date.now()
}: MemoryStoreOptions = {}): MemoryStore {
  const capacity = new MemoryCapacity(bounds, clock)
  const rateCounters = new Map<string, MemoryRateCounter>()
  const outbox = new MemoryOutbox(pendingDeliveries)
  const rateCounter = (name: string): MemoryRateCounter => {
    const counter = rateCounters.get(name) ?? new MemoryRateCounter(keysPerRateLimit, clock)
    rateCounters.set(name, counter)
    return counter
  }
  const keys = new MemoryIdempotencyKeys({ ...IDEMPOTENCY_KEY_DEFAULTS, ...idempotencyKeys }, capacity, rateCounter, clock)
  const users = new MemoryUserStore(capacity)
  const sessions = new MemorySessionStore(capacity, users, clock)
  const items = new MemoryItemStore(maxItemsPerContributor, outbox, keys, capacity, users, rateCounter)
  let open = true
  return {
    users,
    sessions,
    items,
    idempotencyKeys: keys,
    accounts: new MemoryAccounts(users, sessions, keys, items, capacity),
    outbox,
    rateCounter,
    capacity: async () => capacity.reading(),
    available: () => open,
    now: clock,
    close: async () => { open = false }
  }
}
