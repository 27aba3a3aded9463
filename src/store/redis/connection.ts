import { Redis } from 'ioredis'
import { IDEMPOTENCY_KEY_DEFAULTS, PENDING_DELIVERIES } from '../rules.js'
import { type Store, StoreUnavailableError } from '../store.js'
import { RedisClock } from './clock.js'
import { type CapacitySettings, UNBOUNDED } from '../capacity.js'
import { accountScripts, orderUsers, RedisAccounts } from './accounts.js'
import { admitAccounts, capacityScripts, readCapacity, setCapacity } from './capacity.js'
import { COMMAND_TIMEOUT_MS } from './commands.js'
import { type IdempotencyKeyBounds, idempotencyKeyScripts, RedisIdempotencyKeys } from './idempotency-keys.js'
import { indexItems, itemScripts, RedisItemStore } from './items.js'
import { redisKeys } from './keys.js'
import { outboxScripts, RedisOutbox } from './outbox.js'
import { RedisRateCounter, rateCounterScripts } from './rate-counter.js'
import { RedisSessionStore, sessionScripts } from './sessions.js'
import { HEARTBEAT, type Heartbeat, TrackedSessions, trackSessions } from './tracking.js'
import { RedisUserStore, userScripts } from './users.js'
import { RedisWrites, writeOutcomeScripts } from './writes.js'

/** Every script the store runs, each defined beside the code that runs it; the client loads them by name. */
export const scripts = { ...accountScripts, ...capacityScripts, ...userScripts, ...sessionScripts, ...itemScripts, ...idempotencyKeyScripts, ...outboxScripts, ...rateCounterScripts, ...writeOutcomeScripts }

/** What the store says about its connection; the store plugin logs it. */
export interface RedisStoreLogger {
  warn: (details: object, message: string) => void
  info: (message: string) => void
}

export interface RedisStoreOptions {
  url: string
  /** Starts every key the store writes. */
  keyPrefix: string
  /** Items one contributor may own at once. */
  maxItemsPerContributor: number
  /** How long a create made under an idempotency key is remembered, and how many keys each user keeps. */
  idempotencyKeys?: Partial<IdempotencyKeyBounds>
  logger: RedisStoreLogger
  /** Deliveries each webhook subscriber keeps at most (default PENDING_DELIVERIES); past that, new events are dropped for it. */
  maxPendingDeliveries?: number
  /** What each instance keeps in its own memory: users, sessions (see the defaults below). */
  cache?: { users: number, sessions: number }
  /** The deployment's room for accounts (src/store/capacity.ts); unbounded but by Redis itself when left out. */
  capacity?: CapacitySettings
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
// Reconnecting after a lost connection waits 100 ms more each try, at most this long.
const MAX_RECONNECT_DELAY_MS = 2000
const CONNECT_TIMEOUT_MS = 2000
// TCP keep-alive's first probe after this long idle (ioredis's default is 30 s).
const KEEP_ALIVE_MS = 10_000
// Redis's clock is reckoned again this often, and at each (re)connection, in case either clock was stepped.
const CLOCK_CHECK_INTERVAL_MS = 30_000

/** Shows where Redis is without its password. */
const withoutPassword = (url: string): string => url.replace(/\/\/[^@/]*@/, '//')

// ioredis has no hook for commands: each is timed on its way out, in the one method every command goes through.
function timeCommands (redis: Redis, observe: NonNullable<RedisStoreOptions['observeCommand']>): void {
  const send = redis.sendCommand.bind(redis)
  redis.sendCommand = (command, stream) => {
    const started = performance.now()
    const settled = (): void => { observe(command.name, (performance.now() - started) / 1000) }
    command.promise.then(settled, settled)
    return send(command, stream)
  }
}

/**
 * The store on Redis: any number of instances of the service share one catalogue, its users, sessions and rate
 * limits. Round trips per operation (one unless said):
 *
 * - users.add, users.get, users.findByEmailKey: one (a script for add and findByEmailKey);
 * - sessions.open, rotateRefreshToken, revoke: one each (scripts); get: none for a session this instance has read
 *   while Redis tracks it for the instance, one otherwise; sweep: none (Redis expires keys);
 * - items.add, get, page: one (page is ZRANGE + HMGET in a script: O(log n + pageSize), its total is ZCARD);
 * - items.update, remove: two (read, then a compare-and-set script), and one more each time another instance
 *   changed the item in between;
 * - a rate limit count: one;
 * - outbox.take, settle, pending: one each (take fans out new events first, in the same script); subscribe: none
 *   (the instance passes its subscribers to each take). The item writes append their event to the outbox stream in
 *   the script that makes the change, at no extra round trip.
 *
 * Commands are never queued while Redis is unreachable and never sent again after a lost connection (a script may
 * have run): they fail at once, or after COMMAND_TIMEOUT_MS, with a StoreUnavailableError. A write script that
 * Redis runs only after that (a frozen or overloaded server) changes nothing (WRITE_DEADLINE). A write whose reply
 * was lost is not taken for undone: the instance asks Redis what it did (RedisWrites). The client reconnects by
 * itself.
 */
export async function connectRedisStore (options: RedisStoreOptions): Promise<Store> {
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
    retryStrategy: (attempt) => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)
  })
  if (options.observeCommand !== undefined) timeCommands(redis, options.observeCommand)
  // Said once an outage begins, and once it ends, however many reconnections fail in between.
  let connected = false
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
  redis.on('ready', () => {
    if (!unreachable) return
    unreachable = false
    options.logger.info('Redis is reachable again')
  })
  try {
    await redis.connect()
    connected = true
  } catch (error) {
    redis.disconnect()
    // Both have settled by now; the event, which came first, wins the race.
    const reason = await Promise.race([firstError, Promise.resolve(new Error(String(error)))])
    throw new StoreUnavailableError(`Cannot connect to Redis at ${withoutPassword(options.url)}: ${reason.message}`)
  }
  const clock = new RedisClock(redis)
  await clock.check()
  const checkClock = (): void => { clock.check().catch(() => {}) }
  redis.on('ready', checkClock)
  const clockChecks = setInterval(checkClock, CLOCK_CHECK_INTERVAL_MS).unref()
  const keys = redisKeys(options.keyPrefix)
  await indexItems(redis, keys)
  if (await setCapacity(redis, keys, options.capacity ?? UNBOUNDED) === undefined && options.capacity !== undefined) {
    options.logger.warn({}, 'Redis has no maxmemory and STORE_CAPACITY_MIB is unset: no account\'s floor is guaranteed, and Redis itself is the only bound')
  }
  await orderUsers(redis, keys)
  const unadmitted = await admitAccounts(redis, keys)
  if (unadmitted > 0) {
    options.logger.warn({ accounts: unadmitted }, 'accounts kept from before floors could not all be given one: they draw on the shared part alone')
  }
  const outbox = new RedisOutbox(redis, keys, options.maxPendingDeliveries ?? PENDING_DELIVERIES)
  const sessions = new TrackedSessions(options.cache?.sessions ?? CACHED_SESSIONS)
  const tracking = await trackSessions(redis, sessions, { keyPrefix: keys.session, heartbeatPrefix: keys.sessionHeartbeat, heartbeat: options.heartbeat ?? HEARTBEAT, logger: options.logger })
  let closed = false
  const writes = new RedisWrites(redis, clock, keys.writeOutcome, options.outcomeWithinMs)
  const users = new RedisUserStore(redis, writes, keys, options.cache?.users ?? CACHED_USERS)
  return {
    users,
    sessions: new RedisSessionStore(redis, writes, keys, sessions),
    items: new RedisItemStore(redis, writes, keys, outbox, {
      maxPerContributor: options.maxItemsPerContributor,
      idempotencyKeys: { ...IDEMPOTENCY_KEY_DEFAULTS, ...options.idempotencyKeys },
      logger: options.logger
    }),
    idempotencyKeys: new RedisIdempotencyKeys(redis, writes, keys),
    accounts: new RedisAccounts(redis, writes, keys, users, sessions),
    outbox,
    rateCounter: (name) => new RedisRateCounter(redis, clock, `${keys.rateLimit}${name}:`),
    capacity: async () => await readCapacity(redis, keys),
    // The connection is 'ready' until QUIT's reply has closed it.
    available: () => !closed && redis.status === 'ready',
    now: () => clock.now(),
    close: async () => {
      closed = true
      clearInterval(clockChecks)
      tracking.stop()
      tracking.invalidations.disconnect()
      if (redis.status === 'ready') await redis.quit().catch(() => { redis.disconnect() })
      else redis.disconnect()
    }
  }
}
