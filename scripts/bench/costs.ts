// npm run bench:costs: what a store holds for each thing the sizing rule counts (src/domain/sizing.ts), measured, beside
// the cost the rule takes for it (MEMORY_COSTS, REDIS_COSTS): an account's user, a session with its first refresh
// token's hash, each hash more a session remembers, an idempotency key's record, a rate-limit counter. The memory
// store's heap by default (after a full collection), Redis's own memory (INFO memory's used_memory) with
// BENCH_STORE=redis, at the REDIS_URL and under a key prefix of its own, deleted afterwards. BENCH_COSTS_COUNT (default
// 20 000) of each. Exits 1 when a measured cost passes the rule's: the rule would then let the store outgrow its budget.
import { createHash } from 'node:crypto'
import { Redis } from 'ioredis'
import type { StoreCosts } from '../../src/domain/sizing.js'
import { newItem, newUser } from '../../src/domain/records.js'
import { textBytes } from '../../src/domain/quotas.js'
import { TEXT } from '../../src/domain/serialized.js'
import { randomUuid } from '../../src/runtime/uuid.js'
import { createMemoryStore, MEMORY_COSTS } from '../../src/store/memory/index.js'
import { connectRedisStore } from '../../src/store/redis/connection.js'
import { REDIS_COSTS } from '../../src/store/redis/costs.js'
import type { Store } from '../../src/store/store.js'

const COUNT = Number(process.env.BENCH_COSTS_COUNT ?? 20_000)
const ON_REDIS = process.env.BENCH_STORE === 'redis'
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const keyPrefix = `items-service-bench-costs:${process.pid}:`
const HOUR = 3_600_000
// A session's refresh token is kept by the SHA-256 of it, in hex, as the service keeps it.
const tokenHash = (seed: string): string => createHash('sha256').update(seed).digest('hex')
// A rate-limit counter's key is a digest of an email or an address, as the service keys them.
const counterKey = (seed: number): string => createHash('sha256').update(String(seed)).digest('base64url')

const redis = ON_REDIS ? new Redis(REDIS_URL) : undefined
async function unlinkUnder (redis: Redis, prefix: string): Promise<void> {
  for await (const keys of redis.scanStream({ match: `${prefix}*`, count: 1000 })) {
    if ((keys as string[]).length > 0) await redis.unlink(...(keys as string[]))
  }
}
// Apart from the replies of writes kept for 30 s (write-outcome:<uuid>), which a rate of writes bounds, not the
// accounts (docs/redis.md).
async function held (): Promise<number> {
  if (redis !== undefined) {
    await unlinkUnder(redis, `${keyPrefix}write-outcome:`)
    return Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1])
  }
  ;(globalThis as { gc?: () => void }).gc?.()
  return process.memoryUsage().heapUsed
}

// The bytes held per thing that `make` makes, COUNT of them.
async function perThing (make: (index: number) => Promise<unknown>): Promise<number> {
  const before = await held()
  for (let index = 0; index < COUNT; index += 1) await make(index)
  return (await held() - before) / COUNT
}

const store: Store = ON_REDIS
  ? await connectRedisStore({ url: REDIS_URL, keyPrefix, logger: { warn: () => {}, info: () => {} }, maxItemsPerContributor: COUNT, idempotencyKeys: { perUser: COUNT } })
  : createMemoryStore({ idempotencyKeys: { perUser: COUNT } })
const costs: StoreCosts = ON_REDIS ? REDIS_COSTS : MEMORY_COSTS
const users: string[] = []
const measured: Array<[name: keyof StoreCosts, bytes: number]> = []

measured.push(['perAccount', await perThing(async (index) => {
  const email = `costs-${index}@example.com`
  const user = newUser({ email, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }, email, `$argon2id$v=19$m=19456,t=2,p=1$${'a'.repeat(22)}$${'b'.repeat(43)}`, Date.now())
  await store.users.add(user)
  users.push(user.id)
})])
const sessions: string[] = []
const sessionWithItsHash = await perThing(async (index) => {
  const id = randomUuid()
  sessions.push(id)
  await store.sessions.open({ id, userId: users[index]!, expiresAt: Date.now() + HOUR }, tokenHash(`${id} 0`), COUNT)
})
// Each session's first token presented again within the reuse leeway, for a new one each time: each a hash more
// that the session remembers (up to MAX_PAIRS_PER_ROTATION), as parallel retries of one refresh make.
const rotations = 8
const perTokenHash = await perThing(async (index) => {
  const id = sessions[index]!
  for (let rotation = 1; rotation <= rotations; rotation += 1) await store.sessions.rotateRefreshToken(tokenHash(`${id} 0`), tokenHash(`${id} ${rotation}`), store.now(), HOUR)
}) / rotations
measured.push(['perSession', sessionWithItsHash - perTokenHash], ['perTokenHash', perTokenHash])
// A record: a create made under a key, its item removed since; what it keeps beside its item's text, which its
// account's quota counts (perQuotaByte bounds a text's cost).
let recordedText = 0
const recorded = await perThing(async (index) => {
  const userId = users[index % 100]!
  const key = { userId, key: `record-${index}`, fingerprint: tokenHash(String(index)) }
  const item = (await store.items.add(newItem({ name: `Item ${index}`, description: 'A benchmark item with a short description.' }, userId, Date.now()), undefined, key))!
  recordedText += textBytes(item[TEXT])
  await store.items.remove(item.id, () => {})
}) - recordedText / COUNT
measured.push(['perKey', recorded])
const counter = store.rateCounter('costs')
measured.push(['perRateLimitKey', await perThing(async (index) => {
  await new Promise<void>((resolve, reject) => {
    counter.incr(counterKey(index), HOUR, 10, (outcome) => { if (outcome instanceof Error) reject(outcome); else resolve() })
  })
})])

console.log(`What the ${ON_REDIS ? 'Redis' : 'memory'} store holds per thing the sizing rule counts, ${COUNT} of each (${ON_REDIS ? 'used_memory' : 'heap used after a full collection'}):`)
console.log('| thing | measured bytes | the rule\'s | within it |')
console.log('|---|---:|---:|---|')
for (const [name, bytes] of measured) console.log(`| ${name} | ${Math.round(bytes)} | ${costs[name]} | ${bytes <= costs[name] ? 'yes' : 'NO'} |`)
await store.close()
if (redis !== undefined) {
  await unlinkUnder(redis, keyPrefix)
  redis.disconnect()
}
if (measured.some(([name, bytes]) => bytes > costs[name])) process.exitCode = 1
