// npm run bench:registration-flood: how long a flood of registrations takes to close registration for want of room,
// on the default configuration, through the store's own ledger (src/store/memory/capacity.ts) on a clock of the
// script's: a flood as fast as any service could register, each registration sent the moment the pace lets one
// through. For the memory store on this machine (its heap), and for Redis of maxmemory 1 GiB and 256 MB (the same
// ledger in Lua, src/store/redis/capacity.ts, on a budget of two thirds of it). Prints, per store, the floors, how
// many were reserved at once (unpaced: half of them), and when three quarters, all but one and every floor were.
import { randomUUID } from 'node:crypto'
import { loadConfig } from '../../src/config/config.js'
import { heapUsedLimit } from '../../src/runtime/heap.js'
import { floorsAllowed } from '../../src/store/capacity.js'
import { MemoryCapacity } from '../../src/store/memory/capacity.js'
import { RegistrationPacedError } from '../../src/store/store.js'

const HOUR_MS = 3_600_000
const { capacity } = loadConfig({}).store
const stores = [
  { name: 'memory (this machine\'s heap)', budgetBytes: Math.round(heapUsedLimit(undefined) * 2 / 3) },
  { name: 'Redis, maxmemory 1 GiB', budgetBytes: Math.floor(1024 * 1024 * 1024 * 2 / 3) },
  { name: 'Redis, maxmemory 256 MB', budgetBytes: Math.floor(256 * 1024 * 1024 * 2 / 3) }
]

for (const { name, budgetBytes } of stores) {
  const bounds = { ...capacity, budgetBytes }
  let now = 0
  const ledger = new MemoryCapacity(bounds, () => now)
  const floors = floorsAllowed(bounds)
  const reservedAt: number[] = []
  for (;;) {
    try {
      ledger.admit(randomUUID(), 1_000)
      reservedAt.push(now)
    } catch (error) {
      if (!(error instanceof RegistrationPacedError)) break
      now += error.retryAfterMs
    }
  }
  const hours = (index: number): string => `${((reservedAt[Math.min(index, reservedAt.length - 1)] ?? 0) / HOUR_MS).toFixed(1)} h`
  // The pace begins once the floors left are half of all (PACE_FROM_FLOORS_LEFT_SHARE): every registration before is let through at once.
  const atOnce = reservedAt.filter((at) => at === 0).length
  console.log(`${name}: budget ${budgetBytes} bytes, ${floors} floors; at once ${atOnce} (the pace begins with ${floors - Math.ceil(floors / 2)} taken); ` +
    `three quarters taken after ${hours(Math.floor(floors * 3 / 4))}, all but one after ${hours(floors - 2)}, ` +
    `registration closed after ${hours(floors - 1)}`)
}
