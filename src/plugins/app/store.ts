import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { StoreConfig } from '../../config/config.js'
import { heapUsedLimit } from '../../runtime/heap.js'
import { floorsAllowed, sharedPart } from '../../store/capacity.js'
import { createMemoryStore } from '../../store/memory/index.js'
import { type ServingStore, type Store, StoreFullError, StoreOutOfMemoryError } from '../../store/store.js'
import type { RedisObserver } from '../../store/redis/connection.js'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
  interface FastifyRequest {
    /** The store this request reads and writes: `scopedStore` when set, else the app's. */
    readonly store: ServingStore
    /** A store of its own that serves the request in place of the app's (a sandbox's); null for the app's. */
    scopedStore: ServingStore | null
  }
}

interface StorePluginOptions {
  config: StoreConfig
  /** A store built by the caller (tests); otherwise the one `config` names. */
  store?: Store
  /** Time every Redis command (the metrics are exposed). */
  timeCommands: boolean
  /** MAX_HEAP_USED_MIB, of which the memory store's budget is derived when none is set. */
  maxHeapUsedBytes: number | undefined
}

// Expired idempotency records (and, on Redis, ended sessions) give their room back within this of their end, at
// most CHARGES_PER_SWEEP at a time an instance: a sweep never holds the event loop, or Redis, for long. Each sweep
// also reads the ledger, to say when it has drifted.
const CHARGES_SWEEP_INTERVAL_MS = 5_000
const CHARGES_PER_SWEEP = 1_000

// Of the heap in use that sheds writes, the memory store's budget when none is set: accounts are refused by their
// room before any write is shed.
const MEMORY_BUDGET_SHARE = 2 / 3

// Redis commands take well under a millisecond on a healthy server; COMMAND_TIMEOUT_MS (1 s) ends the slowest.
const COMMAND_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

async function openStore (app: FastifyInstance, { config, timeCommands, maxHeapUsedBytes }: StorePluginOptions): Promise<Store> {
  if (config.kind === 'memory') {
    return createMemoryStore({
      maxItemsPerContributor: config.maxItemsPerUser,
      capacity: { ...config.capacity, budgetBytes: config.capacity.budgetBytes ?? Math.round(heapUsedLimit(maxHeapUsedBytes) * MEMORY_BUDGET_SHARE) },
      idempotencyKeys: config.idempotencyKeys
    })
  }
  // Loaded only for the store it is: ioredis and the Redis store's modules are a good part of a start's imports.
  const { connectRedisStore } = await import('../../store/redis/connection.js')
  return await connectRedisStore({
    url: config.redisUrl,
    sentinel: config.redisSentinel,
    replicasToAcknowledge: config.redisReplicasToAcknowledge,
    observe: redisMetrics(app, config.redisReplicasToAcknowledge),
    keyPrefix: config.redisKeyPrefix,
    maxItemsPerContributor: config.maxItemsPerUser,
    idempotencyKeys: config.idempotencyKeys,
    capacity: config.capacity,
    logger: app.log.child({ store: 'redis' }),
    ...(timeCommands ? { observeCommand: commandTimer(app) } : {})
  })
}

function commandTimer (app: FastifyInstance): (command: string, seconds: number) => void {
  const duration = app.metrics.histogram<'command'>({
    name: 'items_service_redis_command_duration_seconds',
    help: 'Time from sending a Redis command to its reply or failure, by command (a script as eval, then evalsha).',
    labelNames: ['command'],
    buckets: COMMAND_BUCKETS
  })
  return (command, seconds) => { duration.observe({ command }, seconds) }
}

function redisMetrics (app: FastifyInstance, replicas: number): RedisObserver {
  const primaryChanges = app.metrics.counter({
    name: 'items_service_redis_primary_changes_total',
    help: 'Times this instance found the Redis primary on another server than before: failovers it followed.'
  })
  const withoutPrimary = app.metrics.counter({
    name: 'items_service_redis_without_primary_seconds_total',
    help: 'Seconds from losing a Redis primary to being ready on the next, summed over the failovers followed.'
  })
  app.metrics.gauge({
    name: 'items_service_redis_replicas_required',
    help: 'Replicas each write must reach before it is answered (REDIS_REPLICAS_TO_ACKNOWLEDGE).'
  }).set(replicas)
  const acknowledging = app.metrics.gauge({
    name: 'items_service_redis_replicas_acknowledging',
    help: 'Replicas that had the latest write within its deadline (WAIT\'s count); fewer than required answers writes 504 OUTCOME_UNKNOWN. The time writes wait for them is items_service_redis_command_duration_seconds{command="wait"}.'
  })
  const boundsRestored = app.metrics.counter({
    name: 'items_service_redis_bounds_restored_total',
    help: 'Times this instance found that Redis had lost its data (restarted without persistence, or flushed) and set the bounds for accounts again; writes are refused (503) from the loss until then.'
  })
  return {
    primaryChanged: (seconds) => {
      primaryChanges.inc()
      withoutPrimary.inc(seconds)
    },
    acknowledged: (count) => { acknowledging.set(count) },
    boundsRestored: () => { boundsRestored.inc() }
  }
}

function storeMetrics (app: FastifyInstance, store: Store): void {
  app.metrics.gauge({
    name: 'items_service_store_up',
    help: 'Whether the store answers (1) or not (0); always 1 with the memory store.',
    collect () { this.set(store.available() ? 1 : 0) }
  })
  app.metrics.gauge({
    name: 'items_service_items',
    help: 'Items in the catalogue (on Redis, the shared catalogue\'s).',
    async collect () {
      // While the store is unreachable (items_service_store_up says so), the last figure stays.
      const count = await store.items.count().catch(() => undefined)
      if (count !== undefined) this.set(count)
    }
  })
  app.metrics.gauge<'part'>({
    name: 'items_service_store_capacity_bytes',
    help: 'The store\'s room for accounts, in bytes as it holds them (on Redis, a conservative estimate), by part: budget (STORE_CAPACITY_MIB), held (all accounts keep), floors_kept (the part kept for floors), floors (reserved, ACCOUNT_FLOOR_KIB each), shared_used (held past floors; the shared part is budget - floors_kept), drift (refunds found missing from their account: 0 unless the ledger drifted).',
    labelNames: ['part'],
    async collect () {
      // While the store is unreachable, the last figures stay.
      const reading = await store.capacity().catch(() => undefined)
      if (reading === undefined) return
      this.set({ part: 'budget' }, reading.budgetBytes)
      this.set({ part: 'held' }, reading.heldBytes)
      this.set({ part: 'floors_kept' }, reading.floorsKeptBytes)
      this.set({ part: 'floors' }, reading.floorsBytes)
      this.set({ part: 'shared_used' }, reading.sharedUsedBytes)
      this.set({ part: 'drift' }, reading.driftBytes)
    }
  })
  const refusals = app.metrics.counter<'reason'>({
    name: 'items_service_store_full_total',
    help: 'Writes answered 507 STORE_FULL, by whose room refused them: account (its ceiling), shared (the shared part used up), registration (no floor left).',
    labelNames: ['reason']
  })
  const outOfMemory = app.metrics.counter({
    name: 'items_service_redis_out_of_memory_total',
    help: 'Writes Redis refused at its maxmemory (answered 503): what the room for accounts does not charge has filled it.'
  })
  app.addHook('onError', (request, _reply, error, done) => {
    if (error instanceof StoreFullError) refusals.labels(error.limit).inc()
    else if (error instanceof StoreOutOfMemoryError) {
      outOfMemory.inc()
      request.log.error({ err: error }, 'Redis is at its maxmemory: writes are refused until it has room (docs/operations.md, "Capacity")')
    }
    done()
  })
}

/** The room for accounts as the store keeps it, said once at start: what an operator sizes the store by. */
async function logRoom (app: FastifyInstance, store: Store, config: StoreConfig): Promise<void> {
  const reading = await store.capacity()
  const bounds = { ...config.capacity, budgetBytes: reading.budgetBytes }
  app.log.info({
    budgetBytes: reading.budgetBytes,
    floorBytes: bounds.floorBytes,
    ceilingBytes: bounds.ceilingBytes,
    floorsKeptBytes: reading.floorsKeptBytes,
    sharedBytes: sharedPart(bounds),
    floors: floorsAllowed(bounds),
    accounts: reading.accounts
  }, 'room for accounts')
}

/**
 * Shares the store with every route. The store is connected before the app is ready (a Redis that cannot be
 * reached stops the start) and closed with the app, after the last request.
 */
async function storePlugin (app: FastifyInstance, options: StorePluginOptions): Promise<void> {
  const store = options.store ?? await openStore(app, options)
  app.decorate('store', store)
  app.decorateRequest('scopedStore', null)
  app.decorateRequest('store', { getter (this: FastifyRequest) { return this.scopedStore ?? store } })
  storeMetrics(app, store)
  if (options.store === undefined) await logRoom(app, store, options.config)
  // What the ledger had found drifted when last read: each rise is said once.
  let driftBytes = 0
  const sweep = async (): Promise<void> => {
    await store.idempotencyKeys.sweep(store.now(), CHARGES_PER_SWEEP)
    const reading = await store.capacity()
    if (reading.driftBytes > driftBytes) {
      app.log.error({ driftBytes: reading.driftBytes, risenBy: reading.driftBytes - driftBytes },
        'the room for accounts drifted: refunds found less charged to their account than they give back (docs/operations.md, "Capacity")')
    }
    driftBytes = reading.driftBytes
  }
  const sweeper = setInterval(() => {
    // While the store is unreachable (its own warning says so), nothing is swept.
    if (!store.available()) return
    sweep().catch((err: unknown) => { app.log.warn({ err }, 'the sweep of expired charges failed') })
  }, CHARGES_SWEEP_INTERVAL_MS).unref()
  app.addHook('onClose', async () => {
    clearInterval(sweeper)
    await store.close()
  })
}

export default fp(storePlugin, { name: 'store', dependencies: ['metrics'] })
