// npm run bench:store: a store at 1 000 000 items (BENCH_ITEMS), the in-memory one by default, Redis with
// BENCH_STORE=redis (at REDIS_URL, under a key prefix of its own, deleted afterwards). Shows that a page costs the
// same whatever its number and its filter (status, contributor, both: each a list of its own in creation order),
// and how much memory one stored item takes: heap in memory, Redis's own (INFO memory's used_memory) on Redis. Each item
// is as the service's bench creates them (a name, a short description) with timestamps of its own.
import { Redis } from 'ioredis'
import { connectRedisStore } from '../../src/store/redis/connection.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import type { ItemFilter, Store } from '../../src/store/store.js'
import { randomUuid } from '../../src/runtime/uuid.js'
import { newUser } from '../../src/domain/records.js'

const ITEMS = Number(process.env.BENCH_ITEMS ?? 1_000_000)
const ON_REDIS = process.env.BENCH_STORE === 'redis'
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const PAGE_SIZE = 100
// 99 contributors (so that each has archived items and active ones); every fourth item archived.
const CONTRIBUTORS = Array.from({ length: 99 }, () => randomUuid())
const ADDS_IN_FLIGHT = ON_REDIS ? 1000 : 1
const DESCRIPTION = 'A benchmark item with a short description.'
const collectGarbage = (): void => { (globalThis as { gc?: () => void }).gc?.() }

async function redisUsedMemory (): Promise<number> {
  const redis = new Redis(REDIS_URL)
  const info = await redis.info('memory')
  redis.disconnect()
  return Number(/used_memory:(\d+)/.exec(info)?.[1])
}

const keyPrefix = `items-service-bench-store:${process.pid}:`
async function openStore (): Promise<Store> {
  if (!ON_REDIS) return createMemoryStore()
  const silent = { warn: () => {}, info: () => {} }
  return await connectRedisStore({ url: REDIS_URL, keyPrefix, logger: silent, maxItemsPerContributor: ITEMS })
}

async function deleteBenchKeys (): Promise<void> {
  const redis = new Redis(REDIS_URL)
  for await (const keys of redis.scanStream({ match: `${keyPrefix}*`, count: 1000 })) {
    if ((keys as string[]).length > 0) await redis.unlink(...(keys as string[]))
  }
  redis.disconnect()
}

collectGarbage()
const heapBefore = process.memoryUsage().heapUsed
const redisBefore = ON_REDIS ? await redisUsedMemory() : 0
const store = await openStore()
const { items } = store
// A store keeps items only for users it has.
for (const [index, id] of CONTRIBUTORS.entries()) {
  const email = `contributor-${index}@example.com`
  await store.users.add(newUser({ email, firstName: 'A', lastName: 'B', role: 'contributor' }, email, 'unused', Date.now(), id))
}
const started = Date.now()
// Ids as the service makes them: one flat 36-character string each (crypto.randomUUID()'s stay a tree of
// concatenated strings, about 480 bytes, until something flattens them).
for (let first = 0; first < ITEMS; first += ADDS_IN_FLIGHT) {
  await Promise.all(Array.from({ length: Math.min(ADDS_IN_FLIGHT, ITEMS - first) }, async (_, offset) => {
    const index = first + offset
    const now = new Date(started + index).toISOString()
    // The name and description as the service has them, parsed from a request's body: strings of their own.
    const { name, description } = JSON.parse(`{"name":"Item ${index}","description":"${DESCRIPTION}"}`) as { name: string, description: string }
    await items.add({
      id: randomUuid(),
      name,
      description,
      status: index % 4 === 0 ? 'archived' : 'active',
      contributorId: CONTRIBUTORS[index % CONTRIBUTORS.length]!,
      createdAt: now,
      updatedAt: now
    })
  }))
}
const fillSeconds = (Date.now() - started) / 1000
collectGarbage()
const bytesPerItem = ON_REDIS ? (await redisUsedMemory() - redisBefore) / ITEMS : (process.memoryUsage().heapUsed - heapBefore) / ITEMS

async function microsecondsPerPage (filter: ItemFilter, page: number, rounds = ON_REDIS ? 500 : 2000): Promise<number> {
  const offset = (page - 1) * PAGE_SIZE
  for (let round = 0; round < rounds / 10; round += 1) await items.page(offset, PAGE_SIZE, filter)
  const started = process.hrtime.bigint()
  for (let round = 0; round < rounds; round += 1) await items.page(offset, PAGE_SIZE, filter)
  return Number(process.hrtime.bigint() - started) / 1000 / rounds
}

const filters: Array<[string, ItemFilter]> = [
  ['every item', {}],
  ['status=active', { status: 'active' }],
  ['contributorId', { contributorId: CONTRIBUTORS[0] }],
  ['contributorId & status=archived', { contributorId: CONTRIBUTORS[0], status: 'archived' }]
]
console.log(`${ITEMS} items on ${ON_REDIS ? 'Redis' : 'the memory store'}, ${CONTRIBUTORS.length} contributors, every fourth archived; ` +
  `filled in ${fillSeconds.toFixed(1)} s, ${Math.round(bytesPerItem)} bytes of ${ON_REDIS ? 'Redis memory' : 'heap'} per item (name "Item N", a ${DESCRIPTION.length}-character description); ` +
  `${Math.round((await store.usage()).heldBytes / ITEMS)} bytes counted against its contributor's quota (src/domain/quotas.ts)`)
console.log(`| filter | items kept | µs a page of ${PAGE_SIZE}: first | middle | last |`)
console.log('|---|---:|---:|---:|---:|')
for (const [name, filter] of filters) {
  const { total } = await items.page(0, 1, filter)
  const lastPage = Math.max(1, Math.ceil(total / PAGE_SIZE))
  const timings = []
  for (const page of [1, Math.ceil(lastPage / 2), lastPage]) timings.push((await microsecondsPerPage(filter, page)).toFixed(2))
  console.log(`| ${name} | ${total} | ${timings.join(' | ')} |`)
}
await store.close()
if (ON_REDIS) await deleteBenchKeys()
