import type { Redis } from 'ioredis'
import type { AccountBounds } from '../../domain/quotas.js'
import { IDEMPOTENCY_KEY_DEFAULTS, type IdempotencyKeyBounds } from '../../domain/bounds.js'
import { RecentTexts } from '../../runtime/recent-texts.js'
import type { Store } from '../store.js'
import { RedisAccounts } from './accounts.js'
import type { RedisClock } from './clock.js'
import { RedisIdempotencyKeys } from './idempotency-keys.js'
import { RedisItemStore } from './items.js'
import type { RedisKeys } from './keys.js'
import { RedisOutbox, type RedisOutboxBounds } from './outbox.js'
import { readUsage } from './quotas.js'
import { RedisRateCounter } from './rate-counter.js'
import { RedisSessionStore } from './sessions.js'
import type { TrackedSessions } from './tracking.js'
import { RedisUserStore } from './users.js'
import type { StoreWrites } from './writes.js'

/** What every catalogue kept on one connection shares: the client and Redis's clock as this instance reckons it. */
export interface RedisConnection {
  readonly redis: Redis
  readonly clock: RedisClock
  readonly logger: { warn: (details: object, message: string) => void }
}

/** How one catalogue is kept under its keys. */
export interface CatalogueOptions {
  /** Its writes, with its clock (RedisWrites, or a sandbox generation's `ofSandbox`). */
  readonly writes: StoreWrites
  /** Its time: Redis's, or a sandbox's moved on. */
  readonly now: () => number
  /** This instance's copies of its sessions, kept only while Redis tracks them (a sandbox's never are). */
  readonly sessions: TrackedSessions
  /** Users this instance keeps copies of. */
  readonly cachedUsers: number
  /** Characters of the ids and texts of the items it edited that this instance keeps (RecentTexts). */
  readonly itemTextCharacters: number
  readonly maxItemsPerContributor: number
  /** IDEMPOTENCY_KEY_DEFAULTS where left out. */
  readonly idempotencyKeys?: Partial<IdempotencyKeyBounds> | undefined
  /** What its outbox keeps. */
  readonly outbox: RedisOutboxBounds
  /** Client keys each of its rate limits keeps under its limit, and as many again over it. */
  readonly keysPerRateLimit: number
  /** How many accounts it admits, and each one's quota. */
  readonly accounts: AccountBounds
}

/** A catalogue kept under `keys` on the connection: all of a Store but what belongs to the connection itself. */
export type Catalogue = Omit<Store, 'available' | 'close'> & { readonly outbox: RedisOutbox }

export function catalogueUnder ({ redis, logger }: RedisConnection, keys: RedisKeys, options: CatalogueOptions): Catalogue {
  const { writes } = options
  const outbox = new RedisOutbox(redis, writes, keys, options.outbox)
  const users = new RedisUserStore(redis, writes, keys, options.cachedUsers, options.accounts.accounts)
  const idempotencyKeys = { ...IDEMPOTENCY_KEY_DEFAULTS, ...options.idempotencyKeys }
  const sessions = new RedisSessionStore(redis, writes, keys, options.sessions, options.now)
  return {
    users,
    sessions,
    items: new RedisItemStore(redis, writes, keys, outbox, {
      maxPerContributor: options.maxItemsPerContributor,
      idempotencyKeys,
      quotaBytes: options.accounts.quotaBytes,
      itemTexts: new RecentTexts(options.itemTextCharacters),
      logger
    }),
    idempotencyKeys: new RedisIdempotencyKeys(redis, keys),
    accounts: new RedisAccounts(redis, writes, keys, { users, sessions, tracked: options.sessions, quotaBytes: options.accounts.quotaBytes }),
    outbox,
    rateCounter: (name) => new RedisRateCounter(redis, () => writes.deadline(), keys, name, options.keysPerRateLimit),
    usage: async () => await readUsage(redis, keys),
    now: options.now
  }
}
