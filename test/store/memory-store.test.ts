import t from 'tap'
import { createMemoryStore } from '../../src/store/memory-store.js'
import { storeConformance } from './conformance.js'

storeConformance(t, async (_t, { maxItemsPerContributor, maxPendingDeliveries }) => createMemoryStore({
  maxItemsPerContributor,
  ...(maxPendingDeliveries === undefined ? {} : { pendingDeliveries: { deliveries: maxPendingDeliveries, characters: 1024 * 1024 } })
}))
