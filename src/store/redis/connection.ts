import { Redis, type RedisOptions } from 'ioredis'
import { type IdempotencyKeyBounds, KEYS_PER_RATE_LIMIT, PENDING_DELIVERIES, PENDING_DELIVERY_BYTES } from '../../domain/bounds.js'
import type { KeepsSandboxes } from '../sandboxes.js'
import { type Store, StoreUnavailableError } from '../store.js'
import { RedisClock } from './clock.js'
import { type AccountBounds, UNBOUNDED_ACCOUNTS } from '../../domain/quotas.js'
import { orderUsers } from './accounts.js'
import { COMMAND_TIMEOUT_MS, timeCommands } from './commands.js'
import { commitScripts } from './commit.js'
import { idempotencyKeyScripts } from './idempotency-keys.js'
import { indexItems, itemScripts } from './items.js'
import { type RedisKeys, redisKeys } from './keys.js'
import { outboxScripts } from './outbox.js'
import { deadLetterScripts } from './dead-letters.js'
import { quotaScripts, quotasFromLedger, readStoreId, storeId } from './quotas.js'
import { rateCounterScripts } from './rate-counter.js'
import { sandboxScripts } from './sandbox-registry.js'
import { RedisSandboxes } from './sandboxes.js'
import { catalogueUnder } from './store.js'
import { HEARTBEAT, type Heartbeat, serverOf, TrackedSessions, trackSessions } from './tracking.js'
import { RedisWrites, replicationOf } from './writes.js'

/** Every script the store runs, each defined beside the code that runs it; the client loads them by name. */
export const scripts = { ...quotaScripts, ...commitScripts, ...itemScripts, ...idempotencyKeyScripts, ...outboxScripts, ...deadLetterScripts, ...rateCounterScripts, ...sandboxScripts }

/** A deployment's sentinels, and the name they monitor the primary under. */
export interface RedisSentinel {
  sentinels: Array<{ host: string, port: number }>
  name: string
  /** The sentinels' own password. */
  password: string | undefined
}

/** What the store says about its connection; the store plugin logs it. */
export interface RedisStoreLogger {
  warn: (details: object, message: string) => void
  info: (message: string) => void
}

/** Told what the instance sees of failovers, of its writes' replicas and of Redis losing its data (the store plugin's metrics). */
export interface RedisObserver {
  /** The primary is another server than before, after `withoutPrimarySeconds` without one. */
  primaryChanged: (withoutPrimarySeconds: number) => void
  /** A write reached this many replicas (at least the number asked for is enough) within its deadline. */
  acknowledged: (replicas: number) => void
  /** Redis was found to have lost its data (restarted empty, or flushed). */
  dataLost: () => void
}

export interface RedisStoreOptions {
  /** The server; with `sentinel`, only its user, password, database and TLS. */
  url: string
  /** The sentinels that name the primary, which every connection follows through failovers. */
  sentinel?: RedisSentinel | undefined
  /** Replicas that must have each write before it is answered (RedisWrites; 0 by default). */
  replicasToAcknowledge?: number
  observe?: RedisObserver
  /** Starts every key the store writes. */
  keyPrefix: string
  /** Items one contributor may own at once. */
  maxItemsPerContributor: number
  /** How long a create made under an idempotency key is remembered, and how many keys each user keeps. */
  idempotencyKeys?: Partial<IdempotencyKeyBounds>
  logger: RedisStoreLogger
  /** Deliveries each webhook subscriber keeps at most (default PENDING_DELIVERIES); past that, new events are dropped for it. */
  maxPendingDeliveries?: number
  /** Bytes of their events each webhook subscriber keeps at most (default PENDING_DELIVERY_BYTES); past that too. */
  maxPendingDeliveryBytes?: number
  /** What each instance keeps in its own memory: users, sessions, characters of item texts (see the defaults below). */
  cache?: { users: number, sessions: number, itemTextCharacters?: number }
  /** How many accounts the deployment admits, and each one's quota (src/domain/quotas.ts); unbounded when left out. */
  accounts?: AccountBounds
  /** Told how long each command took, answered or failed (a script by the command that ran it: eval, evalsha). */
  observeCommand?: (command: string, seconds: number) => void
  /** How long a write whose reply was lost waits for Redis to tell what it did (default OUTCOME_WITHIN_MS). */
  outcomeWithinMs?: number
  /** How often the connections are proven alive, and how long they are trusted without (default HEARTBEAT). */
  heartbeat?: Heartbeat
}

// Users each instance keeps (the oldest out first); a user is at most about 2 KB, so at most about 20 MB.
const CACHED_USERS = 10_000
// Sessions each instance keeps while Redis tracks them (the oldest out first): about 200 bytes each, 20 MB.
const CACHED_SESSIONS = 100_000
// Characters of the items each instance edited (their ids and texts as its edits left them, the oldest out first),
// which its next edit or delete of each decides on; in bytes, docs/security.md's table of bounds.
const ITEM_TEXT_CHARACTERS = 4 * 1024 * 1024
// Reconnecting after a lost connection waits 100 ms more each try, at most this long.
const MAX_RECONNECT_DELAY_MS = 2000
const CONNECT_TIMEOUT_MS = 2000
const DISCONNECT_TIMEOUT_MS = 100
// TCP keep-alive's first probe after this long idle (ioredis's default is 30 s).
const KEEP_ALIVE_MS = 10_000
// Redis's clock is reckoned again this often, and at each (re)connection, in case either clock was stepped.
const CLOCK_CHECK_INTERVAL_MS = 30_000

// A primary demoted by a failover, or one Sentinel has not yet confirmed, refuses writes with these: the connection
// is made again, to the primary the sentinels name by then.
const FAILOVER_REPLIES = /^(READONLY|MASTERDOWN) /

/**
 * How the client finds the primary: at the URL's host, or through the sentinels. `retryDelay` says how long to
 * wait before asking the sentinels again once none answered; null gives up (the first connection fails the start).
 */
function locating (sentinel: RedisSentinel | undefined, url: string, retryDelay: (attempt: number) => number | null): RedisOptions {
  if (sentinel === undefined) return {}
  return {
    sentinels: sentinel.sentinels,
    name: sentinel.name,
    ...(sentinel.password === undefined ? {} : { sentinelPassword: sentinel.password }),
    // rediss:// asks for TLS to the primary the sentinels name, and to the sentinels.
    ...(url.startsWith('rediss:') ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
    // Subscribes to the sentinels' +switch-master: the connection is made again at the announcement, not when the
    // old primary is found silent.
    failoverDetector: true,
    // A paused primary never closes its end: the connection is dropped at once rather than after 2 s.
    disconnectTimeout: DISCONNECT_TIMEOUT_MS,
    sentinelCommandTimeout: COMMAND_TIMEOUT_MS,
    sentinelRetryStrategy: retryDelay,
    reconnectOnError: (error) => FAILOVER_REPLIES.test(error.message)
  }
}

const reconnectDelay = (attempt: number): number => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)

/** Shows where Redis is without its password. */
const withoutPassword = (url: string): string => url.replace(/\/\/[^@/]*@/, '//')

/**
 * What a start makes of the data before serving, and again once Redis is found to have lost it: the items indexed
 * and the users ordered (a catalogue of 1.0.0 or 1.1.0), the accounts counted again (one kept with the capacity
 * ledger). The id of the data (quotas.ts, `storeId`).
 */
async function prepare (redis: Redis, keys: RedisKeys, logger: RedisStoreLogger): Promise<string> {
  await indexItems(redis, keys)
  await orderUsers(redis, keys)
  if (await quotasFromLedger(redis, keys)) logger.info('the capacity ledger was replaced by quotas: each account\'s bytes counted again from its items and records, the ledger\'s keys deleted')
  return await storeId(redis, keys)
}

/** Redis's maxmemory; undefined when it has none, or will not say (CONFIG renamed away). */
async function maxmemory (redis: Redis): Promise<number | undefined> {
  const [, bytes = '0'] = await redis.config('GET', 'maxmemory').catch(() => []) as string[]
  return Number(bytes) > 0 ? Number(bytes) : undefined
}

/**
 * Finds out, at each connection made again and every heartbeat, whether Redis still holds the data the instance
 * prepared: one that keeps nothing on disk comes back from a restart empty, and so does one flushed. Then it prepares
 * the data again, says so and counts it: an operator learns that the catalogue was lost. `confirmed`: whether the
 * data was found prepared since the connection was last made (the store is unavailable until it is). One check at a
 * time.
 */
function keepPrepared (redis: Redis, keys: RedisKeys, options: RedisStoreOptions, heartbeat: Heartbeat, prepared: string): { confirmed: () => boolean, stop: () => void } {
  let dataId = prepared
  let confirmed = true
  let checking = false
  const check = (): void => {
    if (checking || redis.status !== 'ready') return
    checking = true
    readStoreId(redis, keys).then(async (found) => {
      if (found !== dataId) {
        confirmed = false
        const lost = dataId
        dataId = await prepare(redis, keys, options.logger)
        options.logger.warn({ lost, found, now: dataId }, 'Redis has lost its data (restarted empty, or flushed): the catalogue starts again empty')
        options.observe?.dataLost()
      }
      confirmed = true
    }).catch(() => {}).finally(() => { checking = false })
  }
  redis.on('ready', () => {
    confirmed = false
    check()
  })
  const checks = setInterval(check, heartbeat.intervalMs).unref()
  return { confirmed: () => confirmed, stop: () => { clearInterval(checks) } }
}

/**
 * The store on Redis: any number of instances of the service share one catalogue, its users, sessions and rate
 * limits. Round trips per operation (one unless said):
 *
 * - users.add, users.get: one (add is a guarded commit: commit.ts); users.findByEmailKey: two (the email's user id,
 *   then the user);
 * - sessions.open, revoke: two each, rotateRefreshToken three (what the rules of src/domain/sessions.ts read, a
 *   refresh token's session after its id, then the change they decide, guarded by what was read: commit.ts), and as
 *   many again each time another instance changed what was read; get: none for a session this instance has read
 *   while Redis tracks it for the instance, one otherwise; sweep: none (Redis expires keys);
 * - items.add, get, page: one (page is ZRANGE + HMGET in a script: O(log n + pageSize), its total is ZCARD); a
 *   keyed add sends forgetOldestKeys with its commit, in the same round trip;
 * - items.update, remove: one (the change committed guarded by the item as this instance's edit left it) when it
 *   edited it last, else two (the item read first); one more each time another instance changed the item in between
 *   (the refused commit answers the item as it is), and four more (expired records forgotten, the records and their
 *   bytes read, the change committed again) when the contributor's quota needs their own oldest records forgotten;
 * - a rate limit count: one; none for the item writes' limit, which the write's own script counts;
 * - outbox.take, settle, pending: one each (take fans out new events first, in the same script); subscribe: none
 *   (the instance passes its subscribers to each take). The item writes append their event to the outbox stream in
 *   the step that makes the change, at no extra round trip.
 *
 * Commands are never queued while Redis is unreachable and never sent again after a lost connection (a script may
 * have run): they fail at once, or after COMMAND_TIMEOUT_MS, with a StoreUnavailableError. A write script that
 * Redis runs only after that (a frozen or overloaded server) changes nothing (WRITE_DEADLINE). A write whose reply
 * was lost is not taken for undone: the instance asks Redis what it did (RedisWrites). The client reconnects by
 * itself.
 */
export async function connectRedisStore (options: RedisStoreOptions): Promise<Store & KeepsSandboxes> {
  // Said once an outage begins, and once it ends, however many reconnections fail in between.
  let connected = false
  const redis = new Redis(options.url, {
    lazyConnect: true,
    scripts,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    commandTimeout: COMMAND_TIMEOUT_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    // The kernel's own check of an idle connection, beside the heartbeat (tracking.ts), which bounds a silence.
    keepAlive: KEEP_ALIVE_MS,
    // Not auto-pipelining: it holds each command for a turn of the event loop, and each request waits for its
    // commands one after another (docs/performance.md).
    retryStrategy: reconnectDelay,
    // Sentinels that none answer at the start fail it, as a Redis that does not answer does; later, they are asked
    // again as a lost connection is made again.
    ...locating(options.sentinel, options.url, (attempt) => connected ? reconnectDelay(attempt) : null)
  })
  if (options.observeCommand !== undefined) timeCommands(redis, options.observeCommand)
  let unreachable = false
  // Why the first connection failed: the client says it in an 'error' event, and rejects connect() with only
  // "Connection is closed".
  const firstError = new Promise<Error>((resolve) => redis.once('error', resolve))
  const outageBegins = (why: { err: Error } | { reason: string }): void => {
    if (!connected || unreachable) return
    unreachable = true
    options.logger.warn(why, 'Redis is unreachable; reconnecting')
  }
  redis.on('error', (err: Error) => { outageBegins({ err }) })
  // A connection lost without an error (Redis, or something between, closed it) refuses requests as well until the
  // client is back, which may be before any attempt to reconnect fails. The client does not reconnect after QUIT.
  redis.on('reconnecting', () => { outageBegins({ reason: 'the connection was closed' }) })
  // The server the connection was last ready on, and when it was lost.
  let server = ''
  let lostAt = performance.now()
  redis.on('close', () => { lostAt = performance.now() })
  redis.on('ready', () => {
    const previous = server
    server = serverOf(redis)
    if (previous !== '' && previous !== server) {
      const withoutPrimarySeconds = (performance.now() - lostAt) / 1000
      options.logger.warn({ primary: server, previous, withoutPrimaryMs: Math.round(withoutPrimarySeconds * 1000) }, 'the Redis primary changed (a failover); sessions kept by this instance were forgotten')
      options.observe?.primaryChanged(withoutPrimarySeconds)
    }
    if (!unreachable) return
    unreachable = false
    options.logger.info('Redis is reachable again')
  })
  // Until the store is closed, or its start has failed.
  let closed = false
  // A client ends for good ('end') only when told to, but for one case: with Sentinel, a failover announced while
  // the connection is being made again closes it mid-way, and the client gives up. It is made again here.
  let connectingAgain: NodeJS.Timeout | undefined
  redis.on('end', () => {
    if (closed) return
    options.logger.warn({}, 'the Redis client gave up its connection (a failover announced while it was connecting again); connecting again')
    connectingAgain = setTimeout(() => { redis.connect().catch(() => {}) }, reconnectDelay(1)).unref()
  })
  try {
    await redis.connect()
    connected = true
  } catch (error) {
    closed = true
    redis.disconnect()
    // Both have settled by now; the event, which came first, wins the race.
    const reason = await Promise.race([firstError, Promise.resolve(new Error(String(error)))])
    const where = options.sentinel === undefined ? withoutPassword(options.url) : `the primary '${options.sentinel.name}' of the sentinels ${options.sentinel.sentinels.map(({ host, port }) => `${host}:${port}`).join(', ')}`
    throw new StoreUnavailableError(`Cannot connect to Redis at ${where}: ${reason.message}`)
  }
  const clock = new RedisClock(redis)
  await clock.check()
  const checkClock = (): void => { clock.check().catch(() => {}) }
  redis.on('ready', checkClock)
  const clockChecks = setInterval(checkClock, CLOCK_CHECK_INTERVAL_MS).unref()
  const keys = redisKeys(options.keyPrefix)
  const heartbeat = options.heartbeat ?? HEARTBEAT
  const prepared = keepPrepared(redis, keys, options, heartbeat, await prepare(redis, keys, options.logger))
  const replicasToAcknowledge = options.replicasToAcknowledge ?? 0
  if (replicasToAcknowledge > 0) {
    const online = replicationOf(await redis.info('replication')).replicas.length
    if (online < replicasToAcknowledge) {
      options.logger.warn({ replicasToAcknowledge, replicasOnline: online }, 'fewer Redis replicas are online than REDIS_REPLICAS_TO_ACKNOWLEDGE: writes will be answered 504, then refused (503), until enough are')
    }
  }
  const sessions = new TrackedSessions(options.cache?.sessions ?? CACHED_SESSIONS)
  // The sandboxes' journals' listeners, once sandboxes are made (RedisJournals).
  const journalListeners: Array<(id: string) => void> = []
  const watched = { channel: keys.sandboxJournals, changed: (id: string) => { for (const listener of journalListeners) listener(id) } }
  const tracking = await trackSessions(redis, sessions, { keyPrefix: keys.session, heartbeatPrefix: keys.sessionHeartbeat, heartbeat, logger: options.logger, watched })
  const writes = new RedisWrites(redis, clock, keys.writeOutcome, {
    withinMs: options.outcomeWithinMs,
    replication: {
      replicas: replicasToAcknowledge,
      ...(options.observe === undefined ? {} : { acknowledged: options.observe.acknowledged }),
      shortOfReplicas: (short) => {
        if (short) options.logger.warn({ replicasToAcknowledge }, 'fewer Redis replicas than REDIS_REPLICAS_TO_ACKNOWLEDGE had a write: writes are refused (503) until enough are in sync')
        else options.logger.info('enough Redis replicas are in sync again: writes are taken')
      }
    }
  })
  const connection = { redis, clock, logger: options.logger }
  const cachedUsers = options.cache?.users ?? CACHED_USERS
  const itemTextCharacters = options.cache?.itemTextCharacters ?? ITEM_TEXT_CHARACTERS
  // The connection is 'ready' until QUIT's reply has closed it, and while a stalled server keeps it open; a
  // connection made again serves once its data is found prepared.
  const available = (): boolean => !closed && redis.status === 'ready' && tracking.proven() && prepared.confirmed()
  return {
    ...catalogueUnder(connection, keys, {
      writes,
      now: () => clock.now(),
      sessions,
      cachedUsers,
      itemTextCharacters,
      maxItemsPerContributor: options.maxItemsPerContributor,
      idempotencyKeys: options.idempotencyKeys,
      accounts: options.accounts ?? UNBOUNDED_ACCOUNTS,
      keysPerRateLimit: KEYS_PER_RATE_LIMIT,
      outbox: { deliveries: options.maxPendingDeliveries ?? PENDING_DELIVERIES, deliveryBytes: options.maxPendingDeliveryBytes ?? PENDING_DELIVERY_BYTES }
    }),
    sandboxes: (bounds, sandboxOptions, watcher) => new RedisSandboxes(connection, writes, keys, bounds, { ...sandboxOptions, cachedUsers, itemTextCharacters, journalListeners }, available, watcher),
    available,
    limitBytes: await maxmemory(redis),
    close: async () => {
      closed = true
      clearTimeout(connectingAgain)
      clearInterval(clockChecks)
      prepared.stop()
      tracking.stop()
      tracking.invalidations.disconnect()
      // With Sentinel, QUIT would leave open the connections to the sentinels that listen for a failover, which
      // keep the process alive: disconnecting ends them too (and still sends what was written before the end).
      if (options.sentinel === undefined && redis.status === 'ready') await redis.quit().catch(() => { redis.disconnect() })
      else redis.disconnect()
    }
  }
}
