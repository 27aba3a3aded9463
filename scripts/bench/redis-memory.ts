import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'
import { connectRedisStore } from '../../src/store/redis/connection.js'
import { newUser } from '../../src/domain/records.js'

// What Redis keeps per item at 100 000 of the benchmark's items: MEMORY USAGE of the keys that hold items (exact,
// every element counted), and the growth of used_memory, which includes Redis's own bookkeeping.
const ITEMS_IN_REDIS = 100_000
export async function redisBytesPerItem (redisKeyPrefix: string, item: { description: string }): Promise<{ items: number, keysBytesPerItem: number, usedMemoryBytesPerItem: number }> {
  const prefix = `${redisKeyPrefix}memory:`
  const redis = new Redis(REDIS_URL)
  const usedMemory = async (): Promise<number> => Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1])
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: prefix, maxItemsPerContributor: ITEMS_IN_REDIS, logger: { warn: () => {}, info: () => {} } })
  const before = await usedMemory()
  // A store keeps items only for users it has.
  const contributorId = (await store.users.add(newUser({ email: 'bench@example.com', firstName: 'A', lastName: 'B', role: 'contributor' }, 'bench@example.com', 'unused', Date.now())))!.id
  for (let batch = 0; batch < ITEMS_IN_REDIS / 1000; batch += 1) {
    await Promise.all(Array.from({ length: 1000 }, async (_, index) => {
      const now = new Date().toISOString()
      await store.items.add({ id: randomUUID(), name: `Item ${batch * 1000 + index}`, ...item, status: 'active', contributorId, createdAt: now, updatedAt: now })
    }))
  }
  const grown = await usedMemory() - before
  let keysBytes = 0
  for (const key of ['items', 'item-order', 'item-sequence', 'items-owned']) keysBytes += Number(await redis.memory('USAGE', `${prefix}${key}`, 'SAMPLES', 0))
  await store.close()
  redis.disconnect()
  await deleteKeys(prefix, REDIS_URL)
  return { items: ITEMS_IN_REDIS, keysBytesPerItem: Math.round(keysBytes / ITEMS_IN_REDIS), usedMemoryBytesPerItem: Math.round(grown / ITEMS_IN_REDIS) }
}
