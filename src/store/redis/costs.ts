import type { StoreCosts } from '../../domain/sizing.js'

/**
 * What Redis holds for each thing the sizing rule counts (src/domain/sizing.ts), upper bounds of what `used_memory`
 * grows by for each (`npm run bench:costs`, docs/capacity.md): a value and what its key and the entries that index it
 * take. A refresh token's hash and a rate-limit counter are each a key of their own with an expiry, and an
 * idempotency record a key and three index entries named after it. Apart from the store's modules, which a start on
 * the memory store does not load.
 */
export const REDIS_COSTS: StoreCosts = { perQuotaByte: 6, perAccount: 1536, perKey: 1152, perSession: 1024, perTokenHash: 512, perRateLimitKey: 448, perEventByte: 2 }
