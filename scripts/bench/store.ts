// npm run bench:store: the in-memory store at 1 000 000 items. Shows that a page costs the same whatever its
// number (a slice of the creation-ordered array) and how much memory one stored item takes.
import { randomUUID } from 'node:crypto'
import { createMemoryStore } from '../../src/store/memory-store.js'

const ITEMS = Number(process.env.BENCH_ITEMS ?? 1_000_000)
const PAGE_SIZE = 100
const collectGarbage = (): void => { (globalThis as { gc?: () => void }).gc?.() }

collectGarbage()
const heapBefore = process.memoryUsage().heapUsed
const { items } = createMemoryStore()
const now = new Date().toISOString()
const contributorId = randomUUID()
// As the service does: each item answered once, serialized. That matters to memory: randomUUID() returns a tree of
// concatenated strings (~480 bytes), which serializing flattens to one 36-character string (56 bytes) for good.
for (let index = 0; index < ITEMS; index += 1) {
  JSON.stringify(await items.add({ id: randomUUID(), name: `Item ${index}`, description: null, status: 'active', contributorId, createdAt: now, updatedAt: now }))
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
