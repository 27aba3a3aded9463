import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { StoreConfig } from '../../config/config.js'
import { ConfigError } from '../../config/values.js'
import { SANDBOX_JOURNAL_BYTES } from '../../domain/journal.js'
import { type Sizing, sizing, type StoreCosts } from '../../domain/sizing.js'
import { routes } from '../../../generated/routes.js'
import { heapUsedLimit } from '../../runtime/heap.js'
import { createMemoryStore, MEMORY_COSTS } from '../../store/memory/index.js'
import { REDIS_COSTS } from '../../store/redis/costs.js'
import { KEYS_PER_RATE_LIMIT, MAX_PAIRS_PER_ROTATION, PENDING_DELIVERY_BYTES, DEAD_LETTER_BYTES, REMEMBERED_REPLACED_TOKENS } from '../../domain/bounds.js'
import { type AppStore, KEYS_PER_SANDBOX_RATE_LIMIT, SANDBOX_EVENT_BYTES, type SandboxBounds } from '../../store/sandboxes.js'
import { QuotaExceededError, type ServingStore, type Store, StoreFullError, StoreOutOfMemoryError } from '../../store/store.js'
import type { RedisObserver } from '../../store/redis/connection.js'

declare module 'fastify' {
  interface FastifyInstance {
    store: AppStore
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
  store?: AppStore
  /** Time every Redis command (the metrics are exposed). */
  timeCommands: boolean
  /** What the sizing rule reads beside the store's own bounds. */
  sizing: SizingSettings
}

/** The settings beside the store's that bound what it keeps (src/domain/sizing.ts). */
export interface SizingSettings {
  /** A start that does not fit stops in production; elsewhere it says so. */
  readonly production: boolean
  /** MAX_HEAP_USED_MIB: the memory store's budget, the heap in use past which writes are shed. */
  readonly maxHeapUsedBytes: number | undefined
  readonly sessionsPerAccount: number
  readonly sandboxes: SandboxBounds | undefined
  /** Whether rate limits count (their counters kept). */
  readonly rateLimited: boolean
  /** Webhook subscribers, each with its deliveries and dead letters. */
  readonly subscribers: number
}

// A session remembers its current tokens, those its last rotation replaced (as many), and those replaced before.
const TOKEN_HASHES_PER_SESSION = 2 * MAX_PAIRS_PER_ROTATION + REMEMBERED_REPLACED_TOKENS
// Every limit the contract names keeps its counters, under its limit and, as many again, over it.
const RATE_LIMITS = new Set(routes.flatMap((route) => route.rateLimits)).size
const COUNTERS_PER_LIMIT = 2

// Expired idempotency records give their bytes back to their accounts' quotas within this of their end, at most
// RECORDS_PER_SWEEP at a time an instance: a sweep never holds the event loop, or Redis, for long.
const RECORDS_SWEEP_INTERVAL_MS = 5_000
const RECORDS_PER_SWEEP = 1_000

// Redis commands take well under a millisecond on a healthy server; COMMAND_TIMEOUT_MS (1 s) ends the slowest.
const COMMAND_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]

async function openStore (app: FastifyInstance, { config, timeCommands }: StorePluginOptions): Promise<AppStore> {
  if (config.kind === 'memory') {
    return createMemoryStore({ maxItemsPerContributor: config.maxItemsPerUser, accounts: config.accounts, idempotencyKeys: config.idempotencyKeys })
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
    accounts: config.accounts,
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
  const dataLost = app.metrics.counter({
    name: 'items_service_redis_data_lost_total',
    help: 'Times this instance found that Redis had lost its data (restarted without persistence, or flushed): the catalogue started again empty.'
  })
  return {
    primaryChanged: (seconds) => {
      primaryChanges.inc()
      withoutPrimary.inc(seconds)
    },
    acknowledged: (count) => { acknowledging.set(count) },
    dataLost: () => { dataLost.inc() }
  }
}

function storeMetrics (app: FastifyInstance, store: Store, maxAccounts: number): void {
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
    name: 'items_service_accounts',
    help: 'Accounts the store holds (count) of those it admits (max, MAX_ACCOUNTS), and the bytes of their quotas they use in all (held_bytes): src/domain/quotas.ts.',
    labelNames: ['part'],
    async collect () {
      this.set({ part: 'max' }, maxAccounts)
      // While the store is unreachable, the last figures stay.
      const usage = await store.usage().catch(() => undefined)
      if (usage === undefined) return
      this.set({ part: 'count' }, usage.accounts)
      this.set({ part: 'held_bytes' }, usage.heldBytes)
    }
  })
  const refusals = app.metrics.counter<'bound'>({
    name: 'items_service_account_bounds_refused_total',
    help: 'Writes refused by a bound of accounts: accounts (a registration past MAX_ACCOUNTS, 507 STORE_FULL), quota (a write past ACCOUNT_QUOTA_KIB, 403 ACCOUNT_QUOTA_EXCEEDED).',
    labelNames: ['bound']
  })
  const outOfMemory = app.metrics.counter({
    name: 'items_service_redis_out_of_memory_total',
    help: 'Writes Redis refused at its maxmemory (answered 503): the deployment is not sized for its bounds (docs/capacity.md).'
  })
  app.addHook('onError', (request, _reply, error, done) => {
    if (error instanceof StoreFullError) refusals.labels('accounts').inc()
    else if (error instanceof QuotaExceededError) refusals.labels('quota').inc()
    else if (error instanceof StoreOutOfMemoryError) {
      outOfMemory.inc()
      request.log.error({ err: error }, 'Redis is at its maxmemory: writes are refused until it has room (docs/capacity.md)')
    }
    done()
  })
}

/** The sizing rule (src/domain/sizing.ts) on the bounds the configuration gives, against the store's budget. */
function sizingOf (store: Store, config: StoreConfig, settings: SizingSettings, costs: StoreCosts): Sizing {
  const { sandboxes } = settings
  const rateLimitKeys = settings.rateLimited ? RATE_LIMITS * COUNTERS_PER_LIMIT : 0
  return sizing({
    accounts: config.accounts,
    keysPerAccount: config.idempotencyKeys.perUser,
    sessionsPerAccount: settings.sessionsPerAccount,
    tokenHashesPerSession: TOKEN_HASHES_PER_SESSION,
    sandboxes: sandboxes === undefined
      ? undefined
      : {
          limit: sandboxes.limit,
          accounts: sandboxes.accounts,
          // Its events read back, and its receiver's pending deliveries and dead letters, each as many (SANDBOX_OUTBOX_BOUNDS);
          // and its journal.
          eventBytes: 3 * SANDBOX_EVENT_BYTES + SANDBOX_JOURNAL_BYTES,
          rateLimitKeys: rateLimitKeys * KEYS_PER_SANDBOX_RATE_LIMIT
        },
    rateLimitKeys: rateLimitKeys * KEYS_PER_RATE_LIMIT,
    deliveryBytes: settings.subscribers * (PENDING_DELIVERY_BYTES + DEAD_LETTER_BYTES)
  }, costs, config.kind === 'memory' ? heapUsedLimit(settings.maxHeapUsedBytes) : store.limitBytes)
}

/**
 * Checks the sizing rule at start and says its figures, with the bounds for accounts: a start whose worst case does
 * not fit the store's budget says which settings to change, and stops in production.
 */
async function checkSizing (app: FastifyInstance, store: Store, config: StoreConfig, settings: SizingSettings, costs: StoreCosts): Promise<void> {
  const figures = sizingOf(store, config, settings, costs)
  const { accounts, quotaBytes } = config.accounts
  app.log.info({ maxAccounts: accounts, quotaBytes, accounts: (await store.usage()).accounts, ...figures }, 'bounds for accounts')
  const gauge = app.metrics.gauge<'part'>({
    name: 'items_service_store_sizing_bytes',
    help: 'The sizing rule (docs/capacity.md): what the bounds let the store keep at worst (needed), and what it may hold (budget; absent when nothing bounds it).',
    labelNames: ['part']
  })
  gauge.set({ part: 'needed' }, figures.neededBytes)
  if (figures.budgetBytes === undefined) {
    app.log.warn({}, 'Redis has no maxmemory: nothing checks that the bounds for accounts fit it, and a full Redis stops every write; set maxmemory and maxmemory-policy noeviction (docs/redis.md)')
    return
  }
  gauge.set({ part: 'budget' }, figures.budgetBytes)
  if (figures.fits) return
  const advice = `the bounds for accounts need ${figures.neededBytes} bytes at worst, past the store's ${figures.budgetBytes} (${config.kind === 'memory' ? 'MAX_HEAP_USED_MIB' : 'Redis\'s maxmemory'}): ` +
    `set MAX_ACCOUNTS to at most ${figures.accountsThatFit}, or lower ACCOUNT_QUOTA_KIB, MAX_IDEMPOTENCY_KEYS_PER_USER or MAX_SESSIONS_PER_USER` +
    `${settings.sandboxes === undefined ? '' : ', SANDBOX_LIMIT or SANDBOX_ACCOUNTS'}, or give the store more (docs/capacity.md)`
  if (settings.production) throw new ConfigError(`Invalid configuration: ${advice}`)
  app.log.warn({ neededBytes: figures.neededBytes, budgetBytes: figures.budgetBytes, accountsThatFit: figures.accountsThatFit }, advice)
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
  storeMetrics(app, store, options.config.accounts.accounts)
  if (options.store === undefined) await checkSizing(app, store, options.config, options.sizing, options.config.kind === 'memory' ? MEMORY_COSTS : REDIS_COSTS)
  const sweeper = setInterval(() => {
    // While the store is unreachable (its own warning says so), nothing is swept.
    if (!store.available()) return
    store.idempotencyKeys.sweep(store.now(), RECORDS_PER_SWEEP).catch((err: unknown) => { app.log.warn({ err }, 'the sweep of expired idempotency records failed') })
  }, RECORDS_SWEEP_INTERVAL_MS).unref()
  app.addHook('onClose', async () => {
    clearInterval(sweeper)
    await store.close()
  })
}

export default fp(storePlugin, { name: 'store', dependencies: ['metrics'] })
