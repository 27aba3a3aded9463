// Where the Redis that tests and benchmarks use is (REDIS_URL), and the deletion of what a run kept under its prefix.
import { Redis } from 'ioredis'

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'

/** Deletes every key under `prefix`. */
export async function deleteKeys (prefix: string, url = REDIS_URL): Promise<void> {
  const redis = new Redis(url)
  try {
    const batches: AsyncIterable<string[]> = redis.scanStream({ match: `${prefix}*`, count: 1000 })
    for await (const keys of batches) {
      if (keys.length > 0) await redis.unlink(...keys)
    }
  } finally {
    redis.disconnect()
  }
}
