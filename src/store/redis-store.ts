import { Redis, type Result } from 'ioredis'
import type { Announcement, Counted, Delivery, Item, ItemPage, ItemStore, Outbox, OutboxEvent, RateCounter, RefreshOutcome, Session, SessionStore, Store, Taken, User, UserStore } from './store.js'
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

// Opens every write script: ARGV[1] is the write's deadline on Redis's clock (ms), taken off ARGV so that the
// script's own arguments start at ARGV[1]. A write that reaches Redis after its deadline changes nothing and fails:
// by then its instance has stopped waiting and told the client it failed (503), so it must not happen later (a
// retry would duplicate it, or a refresh retried be taken for a replay). \`now\` is Redis's time, for every instance.
const WRITE_DEADLINE = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > tonumber(table.remove(ARGV, 1)) then
  return redis.error_reply('DEADLINE the write reached Redis after its deadline; nothing was changed')
end
`

// Appends a change's event to the outbox stream, in the script that makes the change, when it was given one:
// ARGV[first..first+3] = event id, channel, body, the stream's bound.
const APPEND_EVENT = `
local function appendEvent (outbox, first)
  if not ARGV[first] then return end
  redis.call('XADD', outbox, 'MAXLEN', '~', ARGV[first + 3], '*', 'id', ARGV[first], 'channel', ARGV[first + 1], 'body', ARGV[first + 2])
end
`

export const scripts = {
  // KEYS: users, user emails. ARGV: id, email key, user as JSON. 1 when added, 0 when the email key is taken.
  addUser: {
    numberOfKeys: 2,
    lua: `${WRITE_DEADLINE}
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
  // token hash, sessions a user may have.
  openSession: {
    numberOfKeys: 3,
    lua: `${WRITE_DEADLINE}${FORGET_SESSION}
local prefix, sessionId, userId, expiresAt, hash = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('HSET', KEYS[1], 'user', userId, 'expires', expiresAt, 'rotated', 0, 'current', hash, 'previous', '', 'replaced', '')
redis.call('PEXPIREAT', KEYS[1], expiresAt)
redis.call('SET', KEYS[2], sessionId, 'PXAT', expiresAt)
-- Scored by their end: every session of a deployment lives as long, so the lowest is also the oldest.
redis.call('ZADD', KEYS[3], expiresAt, sessionId)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[6])
if excess > 0 then
  for _, oldest in ipairs(redis.call('ZRANGE', KEYS[3], 0, excess - 1)) do forget(prefix, oldest) end
end
redis.call('PEXPIREAT', KEYS[3], redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
return 1`
  },
  // KEYS: the presented token. ARGV: prefix, presented hash, next hash, now (ms, Redis's clock as the instance
  // reckons it: see Store.now), reuse leeway (ms), replaced tokens remembered, pairs per rotation. {status, session
  // id, user id, end}.
  rotateRefreshToken: {
    numberOfKeys: 1,
    lua: `${WRITE_DEADLINE}${FORGET_SESSION}
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
    lua: `${WRITE_DEADLINE}${FORGET_SESSION}
forget(ARGV[1], ARGV[2])
return 1`
  },
  // KEYS: items, order, sequence, owned per contributor, outbox. ARGV: id, contributor id, item as JSON, items one
  // contributor may own, and the event (APPEND_EVENT). 1 when added, 0 over the quota.
  addItem: {
    numberOfKeys: 5,
    lua: `${WRITE_DEADLINE}${APPEND_EVENT}
if tonumber(redis.call('HGET', KEYS[4], ARGV[2]) or '0') >= tonumber(ARGV[4]) then return 0 end
redis.call('HINCRBY', KEYS[4], ARGV[2], 1)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
appendEvent(KEYS[5], 5)
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
  // KEYS: items, outbox. ARGV: id, the item as it was read, the item to store, and the event (APPEND_EVENT). 1 when
  // stored, 0 when the item is gone, or the item as it is now when it changed since it was read.
  replaceItem: {
    numberOfKeys: 2,
    lua: `${WRITE_DEADLINE}${APPEND_EVENT}
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
appendEvent(KEYS[2], 4)
return 1`
  },
  // KEYS: items, order, owned per contributor, outbox. ARGV: id, the item as it was read, and the event
  // (APPEND_EVENT). As replaceItem.
  removeItem: {
    numberOfKeys: 4,
    lua: `${WRITE_DEADLINE}${APPEND_EVENT}
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return current end
local contributorId = cjson.decode(current).contributorId
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('HINCRBY', KEYS[3], contributorId, -1) <= 0 then redis.call('HDEL', KEYS[3], contributorId) end
appendEvent(KEYS[4], 3)
return 1`
  },
  // KEYS: outbox, and this subscriber's due deliveries, events, attempts and dropped count. ARGV: prefix, now (ms),
  // most to take, lease (ms), most events to fan out, most deliveries a subscriber keeps, then each subscriber's id
  // and channels (space-separated). First moves events from the outbox stream to every subscriber of their channel
  // (a delivery is due from the moment its event was recorded); then takes this subscriber's due deliveries, each
  // leased until now + lease. {dropped, event id, attempt, "channel body", ...}.
  takeDeliveries: {
    numberOfKeys: 5,
    lua: `
local prefix, now = ARGV[1], tonumber(ARGV[2])
local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[5])
if #entries > 0 then
  local fannedOut = {}
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local eventId, channel, body = fields[2], fields[4], fields[6]
    -- Scored by when it was recorded, the stream id's milliseconds and, in thousandths, its sequence: oldest first.
    local ms, sequence = string.match(entry[1], '^(%d+)-(%d+)$')
    local recordedAt = ms .. '.' .. string.format('%03d', math.min(tonumber(sequence), 999))
    for i = 7, #ARGV, 2 do
      if string.find(' ' .. ARGV[i + 1] .. ' ', ' ' .. channel .. ' ', 1, true) then
        local base = prefix .. 'webhook:' .. ARGV[i] .. ':'
        if redis.call('ZCARD', base .. 'due') >= tonumber(ARGV[6]) then
          redis.call('INCR', base .. 'dropped')
        elseif redis.call('ZADD', base .. 'due', 'NX', recordedAt, eventId) == 1 then
          redis.call('HSET', base .. 'events', eventId, channel .. ' ' .. body)
        end
      end
    end
    fannedOut[#fannedOut + 1] = entry[1]
  end
  redis.call('XDEL', KEYS[1], unpack(fannedOut))
end
local taken = {tonumber(redis.call('GETDEL', KEYS[5]) or '0')}
local leaseEnds = now + tonumber(ARGV[4])
for _, eventId in ipairs(redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[3])) do
  redis.call('ZADD', KEYS[2], leaseEnds, eventId)
  taken[#taken + 1] = eventId
  taken[#taken + 1] = redis.call('HINCRBY', KEYS[4], eventId, 1)
  taken[#taken + 1] = redis.call('HGET', KEYS[3], eventId)
end
return taken`
  },
  // KEYS: a subscriber's due deliveries, events, attempts. ARGV: event id, when to retry ('' when it has ended).
  settleDelivery: {
    numberOfKeys: 3,
    lua: `
if ARGV[2] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
else
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
end
return 1`
  },
  // KEYS: the counter. ARGV: window (ms). {count, ms until the window ends}.
  countHit: {
    numberOfKeys: 1,
    lua: `${WRITE_DEADLINE}
local current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {current, redis.call('PTTL', KEYS[1])}`
  },
  // KEYS: the counter. {count, ms until the window ends}, or nil when the window has no hit.
  peekHits: {
    numberOfKeys: 1,
    lua: `
local current = redis.call('GET', KEYS[1])
if not current then return false end
return {tonumber(current), redis.call('PTTL', KEYS[1])}`
  },
  // KEYS: the counter. One hit less, unless its window has ended (the key is gone) or it counts none.
  refundHit: {
    numberOfKeys: 1,
    lua: `
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1`
  }
} as const

declare module 'ioredis' {
  interface RedisCommander<Context> {
    addUser (users: string, emails: string, deadline: number, id: string, emailKey: string, user: string): Result<0 | 1, Context>
    findUserByEmailKey (users: string, emails: string, emailKey: string): Result<string | null, Context>
    openSession (session: string, token: string, userSessions: string, deadline: number, prefix: string, id: string, userId: string,
      expiresAt: number, tokenHash: string, maxPerUser: number): Result<1, Context>
    rotateRefreshToken (token: string, deadline: number, prefix: string, presentedHash: string, nextHash: string, now: number,
      reuseLeewayMs: number, remembered: number, maxPairs: number): Result<[string, string?, string?, string?], Context>
    revokeSession (deadline: number, prefix: string, id: string): Result<1, Context>
    addItem (items: string, order: string, sequence: string, owned: string, outbox: string, deadline: number, id: string, contributorId: string,
      item: string, maxPerContributor: number, ...event: EventArguments): Result<0 | 1, Context>
    pageItems (items: string, order: string, first: number, last: number): Result<[number, ...Array<string | null>], Context>
    replaceItem (items: string, outbox: string, deadline: number, id: string, expected: string, next: string, ...event: EventArguments): Result<0 | 1 | string, Context>
    removeItem (items: string, order: string, owned: string, outbox: string, deadline: number, id: string, expected: string,
      ...event: EventArguments): Result<0 | 1 | string, Context>
    takeDeliveries (outbox: string, due: string, events: string, attempts: string, dropped: string, prefix: string, now: number,
      limit: number, leaseMs: number, fanOut: number, maxPending: number, ...subscribers: string[]): Result<[number, ...Array<string | number>], Context>
    settleDelivery (due: string, events: string, attempts: string, eventId: string, retryAt: number | ''): Result<1, Context>
    countHit (counter: string, deadline: number, windowMs: number): Result<[number, number], Context>
    peekHits (counter: string): Result<[number, number] | null, Context>
    refundHit (counter: string): Result<1, Context>
  }
}

/** A change's event for its script (APPEND_EVENT), or nothing when the change announces none. */
type EventArguments = [] | [id: string, channel: string, body: string, outboxBound: number]

// Events the outbox stream keeps at most (about, trimmed by whole nodes) while no instance has fanned them out to
// their subscribers yet; an instance does so within a poll of the webhooks plugin, so this is only reached while no
// instance delivers (all of them down, or Redis near its memory limit), and then the oldest are dropped.
const OUTBOX_STREAM_BOUND = 100_000
// Deliveries each subscriber keeps at most; at the bound, new events are dropped for it (counted, and logged by the
// instance that takes its deliveries next).
const PENDING_DELIVERIES = 10_000
// Events one take moves from the outbox stream to their subscribers at most.
const FAN_OUT_BATCH = 1_000

const eventArguments = (event: OutboxEvent | undefined): EventArguments =>
  event === undefined ? [] : [event.id, event.channel, event.body, OUTBOX_STREAM_BOUND]

// As the memory store: reuse detection remembers this many replaced refresh tokens per session, and one rotation
// fans out into at most this many pairs while the reuse leeway lasts.
const REMEMBERED_REPLACED_TOKENS = 16
const MAX_PAIRS_PER_ROTATION = 32
// A page that meets items gone from Redis says so in the log at most this often.
const MISSING_ITEMS_LOG_INTERVAL_MS = 60_000
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
// Sessions each instance keeps while Redis tracks them (the oldest out first): about 200 bytes each, 20 MB.
const CACHED_SESSIONS = 100_000
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
  readonly #clock: RedisClock
  readonly #users: string
  readonly #emails: string
  // Insertion order is age: the oldest leaves first.
  readonly #byId = new Map<string, User>()
  readonly #maxCached: number

  constructor (redis: Redis, clock: RedisClock, prefix: string, maxCached: number) {
    this.#redis = redis
    this.#clock = clock
    this.#maxCached = maxCached
    this.#users = `${prefix}users`
    this.#emails = `${prefix}user-emails`
  }

  async add (user: User): Promise<User | undefined> {
    const json = JSON.stringify(user)
    const added = await call(this.#redis.addUser(this.#users, this.#emails, this.#clock.writeDeadline(), user.id, user.emailKey, json))
    return added === 1 ? parseUser(json) : undefined
  }

  async get (id: string): Promise<User | undefined> {
    const cached = this.cached(id)
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

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }
}

/**
 * Sessions this instance has read, kept only while Redis tells it of every change to them: client-side caching,
 * with CLIENT TRACKING in broadcast mode over the session keys, the invalidations arriving on a connection of
 * their own. Authentication reads the caller's session on every request, and a hit spares it a round trip. A
 * logout, a revocation or an expiry anywhere reaches every instance's cache as Redis makes the change (within a
 * fraction of a millisecond on one host, before a client can send its next request). While either connection is
 * down the cache is empty and off, and a read that an invalidation overtook is not kept.
 */
class TrackedSessions {
  readonly #byId = new Map<string, Session>()
  readonly #maxCached: number
  #invalidations = 0
  #losses = 0
  // The losses counted when tracking was last turned on: tracking holds while no connection dropped since.
  #trackedSince = -1

  constructor (maxCached: number) {
    this.#maxCached = maxCached
  }

  /** Moves on with every invalidation; NaN while Redis does not track the sessions, so that no read then is kept. */
  get epoch (): number {
    return this.#trackedSince === this.#losses ? this.#invalidations : Number.NaN
  }

  get losses (): number {
    return this.#losses
  }

  get (id: string): Session | undefined {
    return this.#byId.get(id)
  }

  /** Keeps a session read when the epoch was `readAt`, unless the epoch moved while the read was on its way. */
  keep (session: Session, readAt: number): void {
    if (readAt !== this.epoch) return
    this.#byId.set(session.id, session)
    if (this.#byId.size > this.#maxCached) this.#byId.delete(this.#byId.keys().next().value!)
  }

  /** Forgets the given sessions, or every session (undefined: Redis flushed its keys). */
  invalidate (ids: string[] | undefined): void {
    this.#invalidations += 1
    if (ids === undefined) this.#byId.clear()
    else for (const id of ids) this.#byId.delete(id)
  }

  /** Tracking was turned on after `losses` read `lossesBefore`; it holds unless a connection dropped since. */
  tracked (lossesBefore: number): void {
    this.#trackedSince = lossesBefore
  }

  /** A connection dropped: Redis tracks nothing for this instance until tracking is turned on again. */
  lost (): void {
    this.#losses += 1
    this.#byId.clear()
  }
}

class RedisSessionStore implements SessionStore {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #prefix: string
  readonly #cache: TrackedSessions

  constructor (redis: Redis, clock: RedisClock, prefix: string, cache: TrackedSessions) {
    this.#redis = redis
    this.#clock = clock
    this.#prefix = prefix
    this.#cache = cache
  }

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    const prefix = this.#prefix
    await call(this.#redis.openSession(`${prefix}session:${session.id}`, `${prefix}refresh-token:${refreshTokenHash}`,
      `${prefix}user-sessions:${session.userId}`, this.#clock.writeDeadline(), prefix, session.id, session.userId, session.expiresAt,
      refreshTokenHash, maxPerUser))
  }

  cached (id: string, now: number): Session | undefined {
    const session = this.#cache.get(id)
    return session !== undefined && session.expiresAt > now ? session : undefined
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const cached = this.#cache.get(id)
    if (cached !== undefined) return cached.expiresAt > now ? cached : undefined
    const readAt = this.#cache.epoch
    const [userId, expires] = await call(this.#redis.hmget(`${this.#prefix}session:${id}`, 'user', 'expires'))
    if (userId === null || userId === undefined) return undefined
    const session = { id, userId, expiresAt: Number(expires) }
    this.#cache.keep(session, readAt)
    return session.expiresAt > now ? session : undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const [status, id, userId, expires] = await call(this.#redis.rotateRefreshToken(`${this.#prefix}refresh-token:${presentedHash}`,
      this.#clock.writeDeadline(), this.#prefix, presentedHash, nextHash, now, reuseLeewayMs, REMEMBERED_REPLACED_TOKENS, MAX_PAIRS_PER_ROTATION))
    if (status === 'rotated' && id !== undefined && userId !== undefined) {
      return { status, session: { id, userId, expiresAt: Number(expires) } }
    }
    return { status: status === 'reused' ? 'reused' : 'unknown' }
  }

  async revoke (id: string): Promise<void> {
    await call(this.#redis.revokeSession(this.#clock.writeDeadline(), this.#prefix, id))
    this.#cache.invalidate([id])
  }

  /** Redis forgets ended sessions by itself (each key expires with its session): there is nothing to sweep. */
  async sweep (): Promise<number> {
    return 0
  }
}

class RedisItemStore implements ItemStore {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #outbox: RedisOutbox
  readonly #maxPerContributor: number
  readonly #items: string
  readonly #order: string
  readonly #sequence: string
  readonly #owned: string
  readonly #parsed: ParsedItems
  // The last change of each item in progress here, which the next one waits for; an entry leaves with its last change.
  readonly #inProgress = new Map<string, Promise<void>>()
  readonly #logger: RedisStoreLogger
  // Items in the creation order but gone from the items hash, skipped by pages: counted, and logged at most once
  // an interval.
  #missingSkipped = 0
  #missingLoggedAt = -Infinity

  constructor (redis: Redis, clock: RedisClock, prefix: string, outbox: RedisOutbox, maxPerContributor: number, maxCachedCharacters: number,
    logger: RedisStoreLogger) {
    this.#redis = redis
    this.#clock = clock
    this.#logger = logger
    this.#outbox = outbox
    this.#parsed = new ParsedItems(maxCachedCharacters)
    this.#maxPerContributor = maxPerContributor
    this.#items = `${prefix}items`
    this.#order = `${prefix}item-order`
    this.#sequence = `${prefix}item-sequence`
    this.#owned = `${prefix}items-owned`
  }

  async add (item: Item, announce?: Announcement): Promise<Item | undefined> {
    const json = itemJson(item)
    const stored = parseItem(json)
    const event = announce?.(stored)
    const added = await call(this.#redis.addItem(this.#items, this.#order, this.#sequence, this.#owned, this.#outbox.stream,
      this.#clock.writeDeadline(), item.id, item.contributorId, json, this.#maxPerContributor, ...eventArguments(event)))
    if (added === 0) return undefined
    this.#outbox.recorded(event)
    return stored
  }

  async get (id: string): Promise<Item | undefined> {
    const json = await call(this.#redis.hget(this.#items, id))
    return json === null ? undefined : this.#parsed.parse(json)
  }

  async page (offset: number, limit: number): Promise<ItemPage> {
    const [total, ...found] = await call(this.#redis.pageItems(this.#items, this.#order, offset, offset + limit - 1))
    const items: Item[] = []
    for (const json of found) if (json !== null) items.push(this.#parsed.parse(json))
    if (items.length < found.length) this.#skipMissing(found.length - items.length)
    return { items, total }
  }

  // An item is missing only when something else deleted it: an eviction policy other than noeviction (README).
  #skipMissing (count: number): void {
    this.#missingSkipped += count
    if (Date.now() - this.#missingLoggedAt < MISSING_ITEMS_LOG_INTERVAL_MS) return
    this.#missingLoggedAt = Date.now()
    this.#logger.warn({ skipped: this.#missingSkipped },
      'items in item-order are missing from items (evicted? Redis needs maxmemory-policy noeviction); pages skip them')
  }

  async update (id: string, change: (current: Item) => Item, announce?: Announcement): Promise<Item | undefined> {
    return await this.#oneAtATime(id, async () => await this.#change(id, async (current, json) => {
      const next = itemJson(change(current))
      const stored = parseItem(next)
      const event = announce?.(stored)
      const outcome = await call(this.#redis.replaceItem(this.#items, this.#outbox.stream, this.#clock.writeDeadline(), id, json, next, ...eventArguments(event)))
      if (outcome !== 1) return outcome
      this.#outbox.recorded(event)
      return stored
    }))
  }

  async remove (id: string, confirm: (current: Item) => void, announce?: Announcement): Promise<Item | undefined> {
    return await this.#oneAtATime(id, async () => await this.#change(id, async (current, json) => {
      confirm(current)
      const event = announce?.(current)
      const outcome = await call(this.#redis.removeItem(this.#items, this.#order, this.#owned, this.#outbox.stream, this.#clock.writeDeadline(), id, json,
        ...eventArguments(event)))
      if (outcome !== 1) return outcome
      this.#outbox.recorded(event)
      return current
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

/**
 * The outbox on Redis: the item scripts append each event to a stream; a take moves the stream's events to a sorted
 * set of due deliveries per subscriber (scored by when each may be taken), then leases the due ones to the taker.
 * A delivery whose taker died stays leased until its lease ends, then any instance takes it again; a retry's wait is
 * its score. A take fans out to the subscribers of the instance that takes: every instance has the same WEBHOOKS.
 */
class RedisOutbox implements Outbox {
  readonly durable = true
  readonly #redis: Redis
  readonly #prefix: string
  // Subscriber id, channels (space-separated), subscriber id, …: as the take script reads them.
  readonly #subscribers: string[] = []
  readonly #listeners: Array<(event: OutboxEvent) => void> = []
  readonly #maxPending: number
  readonly stream: string

  constructor (redis: Redis, prefix: string, maxPending: number) {
    this.#redis = redis
    this.#prefix = prefix
    this.#maxPending = maxPending
    this.stream = `${prefix}outbox`
  }

  /** Tells this process's listeners of an event its item store has just recorded. */
  recorded (event: OutboxEvent | undefined): void {
    if (event !== undefined) for (const listener of this.#listeners) listener(event)
  }

  async subscribe (subscriber: string, channels: readonly string[]): Promise<void> {
    if (!this.#subscribers.includes(subscriber)) this.#subscribers.push(subscriber, channels.join(' '))
  }

  onRecorded (listener: (event: OutboxEvent) => void): void {
    this.#listeners.push(listener)
  }

  async take (subscriber: string, now: number, limit: number, leaseMs: number): Promise<Taken> {
    const keys = this.#keys(subscriber)
    const [dropped, ...taken] = await call(this.#redis.takeDeliveries(this.stream, keys.due, keys.events, keys.attempts, keys.dropped,
      this.#prefix, now, limit, leaseMs, FAN_OUT_BATCH, this.#maxPending, ...this.#subscribers))
    const deliveries: Delivery[] = []
    for (let index = 0; index + 2 < taken.length; index += 3) {
      const [id, attempt, stored] = [String(taken[index]), Number(taken[index + 1]), String(taken[index + 2])]
      const space = stored.indexOf(' ')
      deliveries.push({ event: { id, channel: stored.slice(0, space), body: stored.slice(space + 1) }, attempt })
    }
    return { deliveries, dropped }
  }

  async settle (subscriber: string, delivery: Delivery, retryAt?: number): Promise<void> {
    const keys = this.#keys(subscriber)
    await call(this.#redis.settleDelivery(keys.due, keys.events, keys.attempts, delivery.event.id, retryAt ?? ''))
  }

  async pending (subscriber: string): Promise<number> {
    return await call(this.#redis.zcard(this.#keys(subscriber).due))
  }

  #keys (subscriber: string): { due: string, events: string, attempts: string, dropped: string } {
    const base = `${this.#prefix}webhook:${subscriber}:`
    return { due: `${base}due`, events: `${base}events`, attempts: `${base}attempts`, dropped: `${base}dropped` }
  }
}

class RedisRateCounter implements RateCounter {
  readonly #redis: Redis
  readonly #clock: RedisClock
  readonly #prefix: string

  constructor (redis: Redis, clock: RedisClock, prefix: string) {
    this.#redis = redis
    this.#clock = clock
    this.#prefix = prefix
  }

  incr (key: string, windowMs: number, _max: number, callback: (outcome: Counted | Error) => void): void {
    this.#count(key, windowMs).then(callback, callback)
  }

  peek (key: string, _windowMs: number, callback: (outcome: Counted | undefined | Error) => void): void {
    call(this.#redis.peekHits(`${this.#prefix}${key}`)).then((hits) => {
      callback(hits === null ? undefined : { current: hits[0], ttl: hits[1] })
    }, callback)
  }

  async refund (key: string): Promise<void> {
    await call(this.#redis.refundHit(`${this.#prefix}${key}`))
  }

  async reset (key: string): Promise<void> {
    await call(this.#redis.del(`${this.#prefix}${key}`))
  }

  async #count (key: string, windowMs: number): Promise<Counted> {
    const [current, ttl] = await call(this.#redis.countHit(`${this.#prefix}${key}`, this.#clock.writeDeadline(), windowMs))
    return { current, ttl }
  }
}

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
  logger: RedisStoreLogger
  /** Deliveries each webhook subscriber keeps at most (default 10 000); past that, new events are dropped for it. */
  maxPendingDeliveries?: number
  /** What each instance keeps in its own memory: users, sessions, characters of item JSON (10 000, 100 000, 8 Mi). */
  cache?: { users: number, sessions: number, itemCharacters: number }
}

// A command Redis has not answered in this long fails (503), so a request never hangs on a stalled server.
const COMMAND_TIMEOUT_MS = 1000
// Reconnecting after a lost connection waits 100 ms more each try, at most this long.
const MAX_RECONNECT_DELAY_MS = 2000
const CONNECT_TIMEOUT_MS = 2000
// A write's deadline on Redis comes this long before its command times out here: room for the reply to travel
// and for the error in reckoning Redis's clock (half a round trip), so that a write answered 503 was not applied.
const DEADLINE_MARGIN_MS = 250
// Redis's clock is reckoned again this often, and at each (re)connection, in case either clock was stepped.
const CLOCK_CHECK_INTERVAL_MS = 30_000

/**
 * Redis's clock as this instance reckons it, from TIME, taking the reply to have been made half-way through the
 * round trip: as an offset from this process's wall clock (for `now`) and from its monotonic clock (for deadlines,
 * which must not move when the wall clock is stepped).
 */
class RedisClock {
  readonly #redis: Redis
  #wallOffsetMs = 0
  #monotonicOffsetMs = 0

  constructor (redis: Redis) {
    this.#redis = redis
  }

  async check (): Promise<void> {
    const [sentAt, sentAtWall] = [performance.now(), Date.now()]
    const [seconds, microseconds] = await this.#redis.time()
    const redisTime = Number(seconds) * 1000 + Number(microseconds) / 1000
    this.#monotonicOffsetMs = redisTime - (sentAt + performance.now()) / 2
    this.#wallOffsetMs = Math.round(redisTime - (sentAtWall + Date.now()) / 2)
  }

  now (): number {
    return Date.now() + this.#wallOffsetMs
  }

  /** The time on Redis's clock after which a write sent now must change nothing (see WRITE_DEADLINE). */
  writeDeadline (): number {
    return Math.floor(performance.now() + this.#monotonicOffsetMs) + COMMAND_TIMEOUT_MS - DEADLINE_MARGIN_MS
  }
}

/**
 * Keeps `sessions` told of every change Redis makes to a key under `keyPrefix`. Invalidations arrive on a second
 * connection, in RESP2, where Redis sends them as messages on `__redis__:invalidate`; each time either connection
 * is (re)established, tracking is turned on again on the first with the second as its target. Redis 6 or later.
 */
async function trackSessions (redis: Redis, keyPrefix: string, sessions: TrackedSessions): Promise<Redis> {
  const invalidations = redis.duplicate({ protocol: 2, autoResubscribe: false, lazyConnect: true })
  // The client id of the invalidation connection once it listens; until then Redis refuses to track for it.
  let target = 'none'
  // Tracking belongs to a connection: one made again starts without it, and to change its target it is turned
  // off first. Failures need nothing: the connection that failed is made again, and its 'ready' comes back here.
  const track = async (): Promise<void> => {
    const lossesBefore = sessions.losses
    await redis.client('TRACKING', 'OFF')
    await redis.client('TRACKING', 'ON', 'REDIRECT', target, 'BCAST', 'PREFIX', keyPrefix)
    sessions.tracked(lossesBefore)
  }
  const ignore = (): void => {}
  let established = Promise.resolve()
  invalidations.on('ready', () => {
    established = (async () => {
      const id = await invalidations.client('ID')
      await invalidations.subscribe('__redis__:invalidate')
      target = String(id)
      await track()
    })().catch(ignore)
  })
  invalidations.on('messageBuffer', (_channel: Buffer, keys: unknown) => {
    sessions.invalidate(Array.isArray(keys) ? keys.map((key) => String(key).slice(keyPrefix.length)) : undefined)
  })
  invalidations.on('close', () => {
    target = 'none'
    sessions.lost()
  })
  // The main connection reports outages.
  invalidations.on('error', ignore)
  redis.on('ready', () => { track().catch(ignore) })
  redis.on('close', () => { sessions.lost() })
  // Serving starts with tracking on, unless its connection fails; then it starts when that connection is made.
  await invalidations.connect().catch(ignore)
  await established
  return invalidations
}

/** Shows where Redis is without its password. */
const withoutPassword = (url: string): string => url.replace(/\/\/[^@/]*@/, '//')

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
 * - outbox.take, settle, pending: one each (take fans out up to FAN_OUT_BATCH new events first, in the same
 *   script); subscribe: none (the instance passes its subscribers to each take). The item writes append their
 *   event to the outbox stream in the script that makes the change, at no extra round trip.
 *
 * Commands are never queued while Redis is unreachable and never sent again after a lost connection (a script may
 * have run): they fail at once, or after COMMAND_TIMEOUT_MS, with a StoreUnavailableError. A write script that
 * Redis runs only after that (a frozen or overloaded server) changes nothing (WRITE_DEADLINE). The client
 * reconnects by itself.
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
  const clock = new RedisClock(redis)
  await clock.check()
  const checkClock = (): void => { clock.check().catch(() => {}) }
  redis.on('ready', checkClock)
  const clockChecks = setInterval(checkClock, CLOCK_CHECK_INTERVAL_MS).unref()
  const prefix = options.keyPrefix
  const outbox = new RedisOutbox(redis, prefix, options.maxPendingDeliveries ?? PENDING_DELIVERIES)
  const sessions = new TrackedSessions(options.cache?.sessions ?? CACHED_SESSIONS)
  const invalidations = await trackSessions(redis, `${prefix}session:`, sessions)
  return {
    users: new RedisUserStore(redis, clock, prefix, options.cache?.users ?? CACHED_USERS),
    sessions: new RedisSessionStore(redis, clock, prefix, sessions),
    items: new RedisItemStore(redis, clock, prefix, outbox, options.maxItemsPerContributor, options.cache?.itemCharacters ?? CACHED_ITEM_CHARACTERS,
      options.logger),
    outbox,
    rateCounter: (name) => new RedisRateCounter(redis, clock, `${prefix}rate-limit:${name}:`),
    available: () => redis.status === 'ready',
    now: () => clock.now(),
    close: async () => {
      clearInterval(clockChecks)
      invalidations.disconnect()
      if (redis.status === 'ready') await redis.quit().catch(() => { redis.disconnect() })
      else redis.disconnect()
    }
  }
}
