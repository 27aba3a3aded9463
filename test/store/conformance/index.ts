// What every Store promises, run against each implementation (memory/store.test.ts, redis/store.test.ts), a module
// per concern of the store.
import type { Test } from 'tap'
import type { Store } from '../../../src/store/store.js'
import type { OpenStore } from './fixtures.js'
import { usersConformance } from './users.js'
import { sessionsConformance } from './sessions.js'
import { itemsConformance } from './items.js'
import { rateCountersConformance } from './rate-counters.js'
import { deadLettersConformance } from './dead-letters.js'
import { outboxConformance } from './outbox.js'
import { idempotencyKeysConformance } from './idempotency-keys.js'

export type { OpenStore, OpenStoreOptions } from './fixtures.js'

export function storeConformance (t: Test, open: OpenStore): void {
  const fresh = async (t: Test, maxItemsPerContributor = 1000): Promise<Store> => await open(t, { maxItemsPerContributor })
  usersConformance(t, fresh, open)
  sessionsConformance(t, fresh, open)
  itemsConformance(t, fresh, open)
  rateCountersConformance(t, fresh, open)
  outboxConformance(t, fresh, open)
  deadLettersConformance(t, fresh, open)
  idempotencyKeysConformance(t, fresh, open)
}
