import { Redis, type Result } from 'ioredis'
import type { Counted, Item, ItemPage, ItemStore, RateCounter, RefreshOutcome, Session, SessionStore, Store, User, UserStore } from './store.js'
import { itemRecord, StoreUnavailableError } from './store.js'

// Lua scripts make each write atomic across every instance, in one round trip. Keys are built from the prefix
// inside the scripts only where a script finds them in data it reads (a session's tokens): on one Redis server
// that is allowed; on Redis Cluster every key must then share one hash slot (README, "Many instances").

// Forgets a session: its refresh tokens, its record, its place among its user's sessions.
const FORGET_SESSION = `
local function forget (prefix, sessionId)
  local sessionKey = prefix .. 'session:' .. sessionId
  local fields = redis.call('HMGET', sessionKey, 'user', 'current', 'previous', 'replaced')
  if not fields[1] then return end
  for i = 2, 4 do
    for hash in string.gmatch(fields[i], '%S+') do redis.call('DEL', prefix .. 'refresh-token:' .. hash) end
  end
  redis.call('DEL', sessionKey)
  redis.call('ZREM', prefix .. 'user-sessions:' .. fields[1], sessionId)
end
`

const scripts = {
  // KEYS: users, user emails. ARGV: id, email key, user as JSON. 1 when added, 0 when the email key is taken.
  addUser: {
    numberOfKeys: 2,
    lua: `
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1`
  },
  // KEYS: users, user emails. ARGV: email key. The user as JSON, or nil.
  findUserByEmailKey: {
    numberOfKeys: 2,
    lua: `
local id = redis.call('HGET', KEYS[2], ARGV[1])
if not id then return false end
return redis.call('HGET', KEYS[1], id)`
  },
  // KEYS: session, its first refresh token, its user's sessions. ARGV: prefix, session id, user id, end (ms),
  // token hash, sessions a user may have, now (ms).
  openSession: {
    numberOfKeys: 3,
    lua: `${FORGET_SESSION}
local prefix, sessionId, userId, expiresAt, hash = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('HSET', KEYS[1], 'user', userId, 'expires', expiresAt, 'rotated', 0, 'current', hash, 'previous', '', 'replaced', '')
redis.call('PEXPIREAT', KEYS[1], expiresAt)
redis.call('SET', KEYS[2], sessionId, 'PXAT', expiresAt)
-- Scored by their end: every session of a deployment lives as long, so the lowest is also the oldest.
redis.call('ZADD', KEYS[3], expiresAt, sessionId)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[6])
if excess > 0 then
  for _, oldest in ipairs(redis.call('ZRANGE', KEYS[3], 0, excess - 1)) do forget(prefix, oldest) end
end
redis.call('PEXPIREAT', KEYS[3], redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
return 1`
  },
  // KEYS: the presented token. ARGV: prefix, presented hash, next hash, now (ms), reuse leeway (ms), replaced
  // tokens remembered, pairs per rotation. {status, session id, user id, end}.
  rotateRefreshToken: {
    numberOfKeys: 1,
    lua: `${FORGET_SESSION}
local prefix, presented, nextHash, now, leeway = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local sessionId = redis.call('GET', KEYS[1])
if not sessionId then return {'unknown'} end
local sessionKey = prefix .. 'session:' .. sessionId
local session = redis.call('HMGET', sessionKey, 'user', 'expires', 'rotated', 'current', 'previous', 'replaced')
if not session[1] or tonumber(session[2]) <= now then
  forget(prefix, sessionId)
  redis.call('DEL', KEYS[1])
  return {'unknown'}
end
local function split (text)
  local list = {}
  for hash in string.gmatch(text, '%S+') do list[#list + 1] = hash end
  return list
end
local function contains (list, wanted)
  for _, hash in ipairs(list) do if hash == wanted then return true end end
  return false
end
local current, previous, replaced, rotatedAt = split(session[4]), split(session[5]), split(session[6]), tonumber(session[3])
if contains(current, presented) then
  for _, hash in ipairs(previous) do replaced[#replaced + 1] = hash end
  while #replaced > tonumber(ARGV[6]) do redis.call('DEL', prefix .. 'refresh-token:' .. table.remove(replaced, 1)) end
  previous, current, rotatedAt = current, {nextHash}, now
elseif contains(previous, presented) and now - rotatedAt < leeway then
  if #current >= tonumber(ARGV[7]) then return {'unknown'} end
  current[#current + 1] = nextHash
else
  forget(prefix, sessionId)
  return {'reused'}
end
redis.call('HSET', sessionKey, 'rotated', rotatedAt, 'current', table.concat(current, ' '),
  'previous', table.concat(previous, ' '), 'replaced', table.concat(replaced, ' '))
redis.call('SET', prefix .. 'refresh-token:' .. nextHash, sessionId, 'PXAT', session[2])
return {'rotated', sessionId, session[1], session[2]}`
  },
  // KEYS: none. ARGV: prefix, session id.
  revokeSession: {
    numberOfKeys: 0,
    lua: `${FORGET_SESSION}
forget(ARGV[1], ARGV[2])
return 1`
  },
  // KEYS: items, order, sequence, owned per contributor. ARGV: id, contributor id, item as JSON, items one
  // contributor may own. 1 when added, 0 over the quota.
  addItem: {
    numberOfKeys: 4,
    lua: `
if tonumber(redis.call('HGET', KEYS[4], ARGV[2]) or '0') >= tonumber(ARGV[4]) then return 0 end
redis.call('HINCRBY', KEYS[4], ARGV[2], 1)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1`
  },
  // KEYS: items, order. ARGV: first rank, last rank. {total, item JSON...}.
  pageItems: {
    numberOfKeys: 2,
    lua: `
local ids = redis.call('ZRANGE', KEYS[2], ARGV[1], ARGV[2])
local total = redis.call('ZCARD', KEYS[2])
if #ids == 0 then return {total} end
return {total, unpack(redis.call('HMGET', KEYS[1], unpack(ids)))}`
  },
  // KEYS: items. ARGV: id, the item as it was read, the item to store. 1 when stored, 0 when the item is gone,
  // or the item as it is now when it changed since it was read.
  replaceItem: {
    numberOfKeys: 1,
    lua: `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1`
  },
  // KEYS: items, order, owned per contributor. ARGV: id, the item as it was read. As replaceItem.
  removeItem: {
    numberOfKeys: 3,
    lua: `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return current end
local contributorId = cjson.decode(current).contributorId
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('HINCRBY', KEYS[3], contributorId, -1) <= 0 then redis.call('HDEL', KEYS[3], contributorId) end
return 1`
  },
  // KEYS: the counter. ARGV: window (ms). {count, ms until the window ends}.
  countHit: {
    numberOfKeys: 1,
    lua: `
local current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {current, redis.call('PTTL', KEYS[1])}`
  }
} as const

declare module 'ioredis' {
  interface RedisCommander<Context> {
    addUser (users: string, emails: string, id: string, emailKey: string, user: string): Result<0 | 1, Context>
    findUserByEmailKey (users: string, emails: string, emailKey: string): Result<string | null, Context>
    openSession (session: string, token: string, userSessions: string, prefix: string, id: string, userId: string,
      expiresAt: number, tokenHash: string, maxPerUser: number, now: number): Result<1, Context>
    rotateRefreshToken (token: string, prefix: string, presentedHash: string, nextHash: string, now: number,
      reuseLeewayMs: number, remembered: number, maxPairs: number): Result<[string, string?, string?, string?], Context>
    revokeSession (prefix: string, id: string): Result<1, Context>
    addItem (items: string, order: string, sequence: string, owned: string, id: string, contributorId: string,
      item: string, maxPerContributor: number): Result<0 | 1, Context>
    pageItems (items: string, order: string, first: number, last: number): Result<[number, ...string[]], Context>
    replaceItem (items: string, id: string, expected: string, next: string): Result<0 | 1 | string, Context>
    removeItem (items: string, order: string, owned: string, id: string, expected: string): Result<0 | 1 | string, Context>
    countHit (counter: string, windowMs: number): Result<[number, number], Context>
  }
}

// As the memory store: reuse detection remembers this many replaced refresh tokens per session, and one rotation
// fans out into at most this many pairs while the reuse leeway lasts.
const REMEMBERED_REPLACED_TOKENS = 16
const MAX_PAIRS_PER_ROTATION = 32
// An edit or delete re-reads the item and tries again when another instance changed it in between; past this
// many tries it gives up with a StoreUnavailableError rather than hold the request.
const MAX_CHANGE_ATTEMPTS = 16

/**
 * Turns what Redis could not do into a StoreUnavailableError: unreachable, timed out, out of memory, loading.
 * A reply that says a command or script is wrong is a bug, and stays what it is.
 */
function unavailable (error: unknown): never {
  if (error instanceof Error && error.name === 'ReplyError' && /^(ERR|WRONGTYPE)/.test(error.message)) throw error
  throw new StoreUnavailableError(`Redis: ${String(error)}`, { cause: error })
}

async function call<T> (command: Promise<T>): Promise<T> {
  try {
    return await command
  } catch (error) {
    return unavailable(error)
  }
}

// Stored as the service wrote them; handed out frozen, as the memory store's are.
const parseUser = (json: string): User => Object.freeze(JSON.parse(json) as User)
const parseItem = (json: string): Item => Object.freeze(JSON.parse(json) as Item)

// Users each instance keeps (the oldest out first); a user is at most about 2 KB, so at most about 20 MB.
const CACHED_USERS = 10_000
// Characters of item JSON each instance keeps parsed (the oldest out first): with the parsed items, about 32 MB.
const CACHED_ITEM_CHARACTERS = 8 * 1024 * 1024

/**
 * Items parsed before, by the JSON they were parsed from: an item read again unchanged (a page every client reads)
 * costs a lookup instead of a parse and a new object. A changed item has other JSON, so it is parsed afresh.
 */
class ParsedItems {
  readonly #byJson = new Map<string, Item>()
  readonly #maxCharacters: number
  #characters = 0

  constructor (maxCharacters: number) {
    this.#maxCharacters = maxCharacters
  }

  parse (json: string): Item {
    const cached = this.#byJson.get(json)
    if (cached !== undefined) return cached
    const item = parseItem(json)
    this.#byJson.set(json, item)
    this.#characters += json.length
    // No iterator is made while there is room.
    while (this.#characters > this.#maxCharacters) {
      const oldest = this.#byJson.keys().next().value!
      this.#byJson.delete(oldest)
      this.#characters -= oldest.length
    }
    return item
  }
}

// In one order of fields, so that the JSON read back compares equal to the JSON written.
const itemJson = (item: Item): string => JSON.stringify(itemRecord(item))

/**
 * Users are never changed or removed once added, so each instance keeps the ones it has read: authentication
 * reads the caller's user on every request, and this spares it a round trip.
 */
class RedisUserStore implements UserStore {
  readonly #redis: Redis
  readonly #users: string
  readonly #emails: string
  // Insertion order is age: the oldest leaves first.
  readonly #byId = new Map<string, User>()
  readonly #maxCached: number

  constructor (redis: Redis, prefix: string, maxCached: number) {
    this.#redis = redis
    this.#maxCached = maxCached
    this.#users = `${prefix}users`
    this.#emails = `${prefix}user-emails`
  }

  async add (user: User): Promise<User | undefined> {
    const json = JSON.stringify(user)
    const added = await call(this.#redis.addUser(this.#users, this.#emails, user.id, user.emailKey, json))
    return added === 1 ? parseUser(json) : undefined
  }

  async get (id: string): Promise<User | undefined> {
    const cached = this.#byId.get(id)
    if (cached !== undefined) return cached
    const json = await call(this.#redis.hget(this.#users, id))
    if (json === null) return undefined
    const user = parseUser(json)
    this.#byId.set(id, user)
    if (this.#byId.size > this.#maxCached) this.#byId.delete(this.#byId.keys().next().value!)
    return user
  }

  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    const json = await call(this.#redis.findUserByEmailKey(this.#users, this.#emails, emailKey))
    return json === null ? undefined : parseUser(json)
  }
}

class RedisSessionStore implements SessionStore {
  readonly #redis: Redis
  readonly #prefix: string

  constructor (redis: Redis, prefix: string) {
    this.#redis = redis
    this.#prefix = prefix
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    const prefix = this.#prefix
    await call(this.#redis.openSession(`${prefix}session:${session.id}`, `${prefix}refresh-token:${refreshTokenHash}`,
      `${prefix}user-sessions:${session.userId}`, prefix, session.id, session.userId, session.expiresAt, refreshTokenHash,
      maxPerUser, Date.now()))
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const [userId, expires] = await call(this.#redis.hmget(`${this.#prefix}session:${id}`, 'user', 'expires'))
    const expiresAt = Number(expires)
    return userId === null || userId === undefined || !(expiresAt > now) ? undefined : { id, userId, expiresAt }
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const [status, id, userId, expires] = await call(this.#redis.rotateRefreshToken(`${this.#prefix}refresh-token:${presentedHash}`,
      this.#prefix, presentedHash, nextHash, now, reuseLeewayMs, REMEMBERED_REPLACED_TOKENS, MAX_PAIRS_PER_ROTATION))
    if (status === 'rotated' && id !== undefined && userId !== undefined) {
      return { status, session: { id, userId, expiresAt: Number(expires) } }
    }
    return { status: status === 'reused' ? 'reused' : 'unknown' }
  }

  async revoke (id: string): Promise<void> {
    await call(this.#redis.revokeSession(this.#prefix, id))
  }

  /** Redis forgets ended sessions by itself (each key expires with its session): there is nothing to sweep. */
  async sweep (): Promise<number> {
    return 0
  }
}

class RedisItemStore implements ItemStore {
  readonly #redis: Redis
  readonly #maxPerContributor: number
  readonly #items: string
  readonly #order: string
  readonly #sequence: string
  readonly #owned: string
  readonly #parsed: ParsedItems
  // The last change of each item in progress here, which the next one waits for; an entry leaves with its last change.
  readonly #inProgress = new Map<string, Promise<void>>()

  constructor (redis: Redis, prefix: string, maxPerContributor: number, maxCachedCharacters: number) {
    this.#redis = redis
    this.#parsed = new ParsedItems(maxCachedCharacters)
    this.#maxPerContributor = maxPerContributor
    this.#items = `${prefix}items`
    this.#order = `${prefix}item-order`
    this.#sequence = `${prefix}item-sequence`
    this.#owned = `${prefix}items-owned`
  }

  async add (item: Item): Promise<Item | undefined> {
    const json = itemJson(item)
    const added = await call(this.#redis.addItem(this.#items, this.#order, this.#sequence, this.#owned, item.id,
      item.contributorId, json, this.#maxPerContributor))
    return added === 1 ? parseItem(json) : undefined
  }

  async get (id: string): Promise<Item | undefined> {
    const json = await call(this.#redis.hget(this.#items, id))
    return json === null ? undefined : this.#parsed.parse(json)
  }

  async page (offset: number, limit: number): Promise<ItemPage> {
    const [total, ...items] = await call(this.#redis.pageItems(this.#items, this.#order, offset, offset + limit - 1))
    return { items: items.map((json) => this.#parsed.parse(json)), total }
  }

  async update (id: string, change: (current: Item) => Item): Promise<Item | undefined> {
    return await this.#oneAtATime(id, async () => await this.#change(id, async (current, json) => {
      const next = itemJson(change(current))
      const outcome = await call(this.#redis.replaceItem(this.#items, id, json, next))
      return outcome === 1 ? parseItem(next) : outcome
    }))
  }

  async remove (id: string, confirm: (current: Item) => void): Promise<Item | undefined> {
    return await this.#oneAtATime(id, async () => await this.#change(id, async (current, json) => {
      confirm(current)
      const outcome = await call(this.#redis.removeItem(this.#items, this.#order, this.#owned, id, json))
      return outcome === 1 ? current : outcome
    }))
  }

  /**
   * Runs the changes of one item that this instance has in progress one after another, so that they never retry
   * against each other: only changes made by other instances can make one try again.
   */
  async #oneAtATime<T> (id: string, task: () => Promise<T>): Promise<T> {
    const running = (this.#inProgress.get(id) ?? Promise.resolve()).then(task)
    const settled = running.then(() => {}, () => {})
    this.#inProgress.set(id, settled)
    try {
      return await running
    } finally {
      if (this.#inProgress.get(id) === settled) this.#inProgress.delete(id)
    }
  }

  /**
   * Optimistic concurrency: reads the item, then has `attempt` write it only if it is still as read. When another
   * instance changed it in between, `attempt` answers with the item as it is now, and runs again on that. So the
   * callbacks of `update` and `remove` may run more than once, each time on the item as it then was: they must be
   * pure. 0 from `attempt` means the item is gone.
   */
  async #change (id: string, attempt: (current: Item, json: string) => Promise<Item | 0 | string>): Promise<Item | undefined> {
    const json = await call(this.#redis.hget(this.#items, id))
    let outcome: Item | 0 | string = json ?? 0
    for (let attempts = 0; typeof outcome === 'string'; attempts += 1) {
      if (attempts === MAX_CHANGE_ATTEMPTS) throw new StoreUnavailableError(`item ${id} changed ${attempts} times while being changed`)
      outcome = await attempt(parseItem(outcome), outcome)
    }
    return outcome === 0 ? undefined : outcome
  }
}

class RedisRateCounter implements RateCounter {
  readonly #redis: Redis
  readonly #prefix: string

  constructor (redis: Redis, prefix: string) {
    this.#redis = redis
    this.#prefix = prefix
  }

  incr (key: string, windowMs: number, _max: number, callback: (outcome: Counted | Error) => void): void {
    this.#count(key, windowMs).then(callback, callback)
  }

  async #count (key: string, windowMs: number): Promise<Counted> {
    const [current, ttl] = await call(this.#redis.countHit(`${this.#prefix}${key}`, windowMs))
    return { current, ttl }
  }
}

/** What the store says about its connection; the store plugin logs it. */
export interface RedisStoreLogger {
  warn: (details: { err: Error }, message: string) => void
  info: (message: string) => void
}

export interface RedisStoreOptions {
  url: string
  /** Starts every key the store writes. */
  keyPrefix: string
  /** Items one contributor may own at once. */
  maxItemsPerContributor: number
  logger: RedisStoreLogger
  /** What each instance keeps in its own memory: users, and characters of item JSON (defaults: 10 000, 8 Mi). */
  cache?: { users: number, itemCharacters: number }
}

// A command Redis has not answered in this long fails (503), so a request never hangs on a stalled server.
const COMMAND_TIMEOUT_MS = 1000
// Reconnecting after a lost connection waits 100 ms more each try, at most this long.
const MAX_RECONNECT_DELAY_MS = 2000
const CONNECT_TIMEOUT_MS = 2000

/** Shows where Redis is without its password. */
const withoutPassword = (url: string): string => url.replace(/\/\/[^@/]*@/, '//')

/**
 * The store on Redis: any number of instances of the service share one catalogue, its users, sessions and rate
 * limits. Round trips per operation (one unless said):
 *
 * - users.add, users.get, users.findByEmailKey: one (a script for add and findByEmailKey);
 * - sessions.open, get, rotateRefreshToken, revoke: one each (scripts but get); sweep: none (Redis expires keys);
 * - items.add, get, page: one (page is ZRANGE + HMGET in a script: O(log n + pageSize), its total is ZCARD);
 * - items.update, remove: two (read, then a compare-and-set script), and one more each time another instance
 *   changed the item in between;
 * - a rate limit count: one.
 *
 * Commands are never queued while Redis is unreachable and never sent again after a lost connection (a script may
 * have run): they fail at once, or after COMMAND_TIMEOUT_MS, with a StoreUnavailableError. The client reconnects
 * by itself.
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
    // Not auto-pipelining: it holds each command for a turn of the event loop, and each request waits for its
    // commands one after another (bench: the list on Redis 0.36× the memory store with it, 0.44× without).
    retryStrategy: (attempt) => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS)
  })
  // Said once an outage begins, and once it ends, however many reconnections fail in between.
  let connected = false
  let unreachable = false
  // Why the first connection failed: the client says it in an 'error' event, and rejects connect() with only
  // "Connection is closed".
  const firstError = new Promise<Error>((resolve) => redis.once('error', resolve))
  redis.on('error', (err: Error) => {
    if (!connected || unreachable) return
    unreachable = true
    options.logger.warn({ err }, 'Redis is unreachable; reconnecting')
  })
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
  const prefix = options.keyPrefix
  return {
    users: new RedisUserStore(redis, prefix, options.cache?.users ?? CACHED_USERS),
    sessions: new RedisSessionStore(redis, prefix),
    items: new RedisItemStore(redis, prefix, options.maxItemsPerContributor, options.cache?.itemCharacters ?? CACHED_ITEM_CHARACTERS),
    rateCounter: (name) => new RedisRateCounter(redis, `${prefix}rate-limit:${name}:`),
    available: () => redis.status === 'ready',
    close: async () => {
      if (redis.status === 'ready') await redis.quit().catch(() => { redis.disconnect() })
      else redis.disconnect()
    }
  }
}
