import type { StoreCosts } from '../../domain/sizing.js'

/**
 * What Redis holds for each thing the sizing rule counts (src/domain/sizing.ts), upper bounds of what `MEMORY USAGE`
 * and `used_memory` measure (docs/capacity.md): a value and a quarter more (jemalloc's size classes), and the entries
 * that index it. Apart from the store's modules, which a start on the memory store does not load.
 */
export const REDIS_COSTS: StoreCosts = { perQuotaByte: 6, perAccount: 1536, perKey: 512, perSession: 1024, perTokenHash: 256, perRateLimitKey: 160, perEventByte: 2 }
