// npm run bench:store: the in-memory store at 1 000 000 items. Shows that a page costs the same whatever its
// number (a slice of the creation-ordered array) and how much memory one stored item takes.
import { createMemoryStore } from '../../src/store/memory-store.js'
import { randomUuid } from '../../src/uuid.js'

const ITEMS = Number(process.env.BENCH_ITEMS ?? 1_000_000)
const PAGE_SIZE = 100
const collectGarbage = (): void => { (globalThis as { gc?: () => void }).gc?.() }

collectGarbage()
const heapBefore = process.memoryUsage().heapUsed
const { items } = createMemoryStore()
const now = new Date().toISOString()
const contributorId = randomUuid()
// Ids as the service makes them: one flat 36-character string each (crypto.randomUUID()'s stay a tree of
// concatenated strings, about 480 bytes, until something flattens them).
for (let index = 0; index < ITEMS; index += 1) {
  await items.add({ id: randomUuid(), name: `Item ${index}`, description: null, status: 'active', contributorId, createdAt: now, updatedAt: now })
}
collectGarbage()
const bytesPerItem = (process.memoryUsage().heapUsed - heapBefore) / ITEMS

async function microsecondsPerPage (page: number, rounds = 2000): Promise<number> {
  const offset = (page - 1) * PAGE_SIZE
  for (let round = 0; round < 200; round += 1) await items.page(offset, PAGE_SIZE)
  const started = process.hrtime.bigint()
  for (let round = 0; round < rounds; round += 1) await items.page(offset, PAGE_SIZE)
  return Number(process.hrtime.bigint() - started) / 1000 / rounds
}

const lastPage = Math.ceil(ITEMS / PAGE_SIZE)
const pages = [1, 5000, lastPage].filter((page) => page <= lastPage)
console.log(`${ITEMS} items, ${Math.round(bytesPerItem)} bytes of heap per item (name "Item N", description null)`)
for (const page of pages) console.log(`page ${page} of ${PAGE_SIZE}: ${(await microsecondsPerPage(page)).toFixed(2)} µs`)
