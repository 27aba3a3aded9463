import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { StoreConfig } from '../../config.js'
import { createMemoryStore } from '../../store/memory/index.js'
import type { Store } from '../../store/store.js'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

interface StorePluginOptions {
  config: StoreConfig
  /** A store built by the caller (tests); otherwise the one `config` names. */
  store?: Store
  /** Time every Redis command (the metrics are exposed). */
  timeCommands: boolean
}

// Redis commands take well under a millisecond on a healthy server; COMMAND_TIMEOUT_MS (1 s) ends the slowest.
const COMMAND_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

async function openStore (app: FastifyInstance, config: StoreConfig, timeCommands: boolean): Promise<Store> {
  if (config.kind === 'memory') {
    return createMemoryStore({
      maxItemsPerContributor: config.maxItemsPerUser,
      // The configuration always derives a budget for the memory store (from the heap); only Redis may lack one.
      capacity: { ...config.capacity, budgetBytes: config.capacity.budgetBytes! },
      idempotencyKeys: config.idempotencyKeys
    })
  }
  // Loaded only for the store it is: ioredis and the Redis store's modules are a good part of a start's imports.
  const { connectRedisStore } = await import('../../store/redis/connection.js')
  return await connectRedisStore({
    url: config.redisUrl,
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
    help: 'The store\'s room for accounts, in bytes as it holds them (on Redis, a conservative estimate), by part: budget (STORE_CAPACITY_MIB), held (all accounts keep), floors (reserved, ACCOUNT_FLOOR_KIB each), shared_used (held past floors; the shared part is budget - floors).',
    labelNames: ['part'],
    async collect () {
      // While the store is unreachable, the last figures stay.
      const reading = await store.capacity().catch(() => undefined)
      if (reading === undefined) return
      this.set({ part: 'budget' }, reading.budgetBytes)
      this.set({ part: 'held' }, reading.heldBytes)
      this.set({ part: 'floors' }, reading.floorsBytes)
      this.set({ part: 'shared_used' }, reading.sharedUsedBytes)
    }
  })
}

/**
 * Shares the store with every route. The store is connected before the app is ready (a Redis that cannot be
 * reached stops the start) and closed with the app, after the last request.
 */
async function storePlugin (app: FastifyInstance, options: StorePluginOptions): Promise<void> {
  const store = options.store ?? await openStore(app, options.config, options.timeCommands)
  app.decorate('store', store)
  storeMetrics(app, store)
  app.addHook('onClose', async () => { await store.close() })
}

export default fp(storePlugin, { name: 'store', dependencies: ['metrics'] })
