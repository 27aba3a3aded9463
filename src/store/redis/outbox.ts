import type { Redis, Result } from 'ioredis'
import type { OutboxBounds } from '../outbox.js'
import { DEAD_LETTER_BYTES, DEAD_LETTERS } from '../../domain/bounds.js'
import { deadLetterPage } from '../../domain/dead-letters.js'
import type { DeadLetter, DeadLetterList, DeadLetterPage, Delivery, Outbox, OutboxEvent, Taken } from '../store.js'
import { call, repliesOf, type Script, scored, transaction } from './commands.js'
import { PENDING_ROOM, type StoredDeadLetter } from './dead-letters.js'
import { type RedisKeys, webhookKeys } from './keys.js'
import type { StoreWrites } from './writes.js'

// Appends a change's event to the outbox stream, in the script that makes the change, when it was given one: `event`
// is {event id, channel, body, the stream's bound (StreamBound), and its traceparent when it has one} (EventArguments).
// A bound in events alone is kept about (trimmed by whole nodes); one in events and bytes (a sandbox's stream, whose
// events are listed by their place) exactly, the oldest first, the bytes of its bodies counted in the stream's key +
// '-bytes' (keys.ts, outbox).
export const APPEND_EVENT = `
local function appendEvent (outbox, event)
  if not event then return end
  local fields = {'id', event[1], 'channel', event[2], 'body', event[3]}
  if event[5] then
    fields[7] = 'traceparent'
    fields[8] = event[5]
  end
  local events, bytes = string.match(event[4], '^(%d+) ?(%d*)$')
  if bytes == '' then
    redis.call('XADD', outbox, 'MAXLEN', '~', events, '*', unpack(fields))
    return
  end
  redis.call('XADD', outbox, '*', unpack(fields))
  local held = redis.call('INCRBY', outbox .. '-bytes', #event[3])
  while held > tonumber(bytes) or redis.call('XLEN', outbox) > tonumber(events) do
    local oldest = redis.call('XRANGE', outbox, '-', '+', 'COUNT', 1)[1]
    redis.call('XDEL', outbox, oldest[1])
    held = redis.call('DECRBY', outbox .. '-bytes', #oldest[2][6])
  end
end
`

// Where a new subscriber of a listing (an outbox stream kept to be listed, a sandbox's) starts reading it: after its
// newest event, as "<stream id> <its place, from 1>" ("0-0 0" before the first), the cursor takeDeliveries keeps.
export const LISTING_END = `
local function listingEnd (stream)
  if redis.call('EXISTS', stream) == 0 then return '0-0 0' end
  local info = redis.call('XINFO', 'STREAM', stream)
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  return fields['last-generated-id'] .. ' ' .. fields['entries-added']
end
`

/** A number of XINFO STREAM's reply, a list of names each followed by its value. */
const streamField = (info: unknown, name: string): number => {
  const fields = info as unknown[]
  return Number(fields[fields.indexOf(name) + 1])
}

/** A listing's events after the place `after` (from 1), at most `limit`, each with its place, the oldest first. */
export async function listedAfter (redis: Redis, listing: string, after: number, limit: number): Promise<Array<{ sequence: number, body: string }>> {
  // At one moment: whether the stream is there (XINFO fails on none), how many were ever added to it (its oldest's
  // place follows, with its length), and its oldest `after + limit`, which hold the page (the oldest's place is 1 or more).
  const reads = redis.multi().exists(listing).xinfo('STREAM', listing).xrange(listing, '-', '+', 'COUNT', after + limit)
  const [exists, ...replies] = (await call(reads.exec()))!
  if (exists![1] === 0) return []
  const [info, oldest] = repliesOf(replies)
  const first = streamField(info, 'entries-added') - streamField(info, 'length') + 1
  const skip = Math.max(0, after + 1 - first)
  // Each entry is [id, ['id', …, 'channel', …, 'body', <its body>, …]] (APPEND_EVENT).
  return (oldest as Array<[string, string[]]>).slice(skip, skip + limit).map(([, fields], index) => ({ sequence: first + skip + index, body: fields[5]! }))
}

export const outboxScripts = {
  // KEYS: outbox, and this subscriber's due deliveries, events, attempts, dropped count, traceparents and cursor.
  // ARGV: now (ms), most to take, lease (ms), most events to fan out, most deliveries a subscriber keeps, 'listed'
  // when the stream is a listing ('' otherwise), most bytes of their events a subscriber keeps, then for each subscriber its channels (space-separated) and its due, events, dropped,
  // traceparents and pending bytes keys. First moves events to every subscriber of their channel (a delivery is
  // due from the moment its event was recorded): from the stream, which they leave, or from a listing, which they
  // stay in, those past this subscriber's cursor (LISTING_END), which moves past them, to it alone; none while it
  // has no cursor (not subscribed, or no more). Then takes this subscriber's due deliveries, each leased until now + lease.
  // {dropped (trimmed from a listing before it was read included), event id, attempt, "channel body", traceparent
  // or '', ...}.
  takeDeliveries: {
    numberOfKeys: 7,
    lua: `${PENDING_ROOM}
local now = tonumber(ARGV[1])
local function fanOut (entries)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local eventId, channel, body, traceparent = fields[2], fields[4], fields[6], fields[8]
    -- Scored by when it was recorded, the stream id's milliseconds and, in thousandths, its sequence: oldest first.
    local ms, sequence = string.match(entry[1], '^(%d+)-(%d+)$')
    local recordedAt = ms .. '.' .. string.format('%03d', math.min(tonumber(sequence), 999))
    local stored = channel .. ' ' .. body
    for i = 8, #ARGV, 6 do
      if (ARGV[6] == '' or ARGV[i + 1] == KEYS[2]) and string.find(' ' .. ARGV[i] .. ' ', ' ' .. channel .. ' ', 1, true) then
        local due, events, dropped, traceparents, bytes = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
        if not hasRoom(due, bytes, stored, tonumber(ARGV[5]), tonumber(ARGV[7])) then
          redis.call('INCR', dropped)
        elseif redis.call('ZADD', due, 'NX', recordedAt, eventId) == 1 then
          redis.call('HSET', events, eventId, stored)
          redis.call('INCRBY', bytes, #stored)
          if traceparent then redis.call('HSET', traceparents, eventId, traceparent) end
        end
      end
    end
  end
end
local trimmed = 0
if ARGV[6] == '' then
  local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[4])
  if #entries > 0 then
    fanOut(entries)
    local fannedOut = {}
    for i, entry in ipairs(entries) do fannedOut[i] = entry[1] end
    redis.call('XDEL', KEYS[1], unpack(fannedOut))
  end
else
  local cursor = redis.call('GET', KEYS[7])
  if not cursor then return {0} end
  local after, place = string.match(cursor, '^(%S+) (%d+)$')
  local entries = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', ARGV[4])
  if #entries > 0 then
    local first = tonumber(place) + 1
    local info = redis.call('XINFO', 'STREAM', KEYS[1])
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    -- The stream's oldest read: those between the cursor and it were trimmed before this subscriber had them.
    if fields['first-entry'][1] == entries[1][1] then
      local oldest = fields['entries-added'] - fields['length'] + 1
      trimmed = math.max(0, oldest - first)
      first = first + trimmed
    end
    fanOut(entries)
    redis.call('SET', KEYS[7], entries[#entries][1] .. ' ' .. (first + #entries - 1))
  end
end
local taken = {trimmed + tonumber(redis.call('GETDEL', KEYS[5]) or '0')}
local leaseEnds = now + tonumber(ARGV[3])
for _, eventId in ipairs(redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[2])) do
  redis.call('ZADD', KEYS[2], leaseEnds, eventId)
  taken[#taken + 1] = eventId
  taken[#taken + 1] = redis.call('HINCRBY', KEYS[4], eventId, 1)
  taken[#taken + 1] = redis.call('HGET', KEYS[3], eventId)
  taken[#taken + 1] = redis.call('HGET', KEYS[6], eventId) or ''
end
return taken`
  },
  // KEYS: a subscriber's due deliveries, events, attempts, traceparents, pending bytes (counted from its first fan-out
  // on: deliveries an earlier version fanned out are not). ARGV: event id, when to retry ('' when it has ended).
  settleDelivery: {
    numberOfKeys: 5,
    lua: `
if ARGV[2] == '' then
  local released = redis.call('HSTRLEN', KEYS[2], ARGV[1])
  if released > 0 and redis.call('EXISTS', KEYS[5]) == 1 then redis.call('DECRBY', KEYS[5], released) end
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
else
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
end
return 1`
  },
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    takeDeliveries (outbox: string, due: string, events: string, attempts: string, dropped: string, traceparents: string, cursor: string, now: number,
      limit: number, leaseMs: number, fanOut: number, maxPending: number, listed: 'listed' | '', maxPendingBytes: number, ...subscribers: string[]):
    Result<[number, ...Array<string | number>], Context>
    settleDelivery (due: string, events: string, attempts: string, traceparents: string, pendingBytes: string, eventId: string, retryAt: number | ''): Result<1, Context>
  }
}

/** A change's event for its script (APPEND_EVENT), or nothing when the change announces none. */
export type EventArguments = [] | [id: string, channel: string, body: string, streamBound: string] |
  [id: string, channel: string, body: string, streamBound: string, traceparent: string]

/** What an outbox's stream keeps at most: so many events, and, when given, so many bytes of their bodies. */
export interface StreamBound {
  readonly events: number
  readonly bytes?: number
}

/** What an outbox keeps for each subscriber, and in its stream. */
export interface RedisOutboxBounds extends OutboxBounds {
  /**
   * What the stream keeps: OUTBOX_STREAM_BOUND when left out. One in bytes as well makes it a listing, kept exactly
   * for its events to be read back by their place, which its subscribers read from a cursor each, leaving it whole.
   */
  readonly stream?: StreamBound
}

// Events the outbox stream keeps at most (about, trimmed by whole nodes) while no instance has fanned them out to
// their subscribers yet; an instance does so within a poll of the webhooks plugin, so this is only reached while no
// instance delivers (all of them down, or Redis near its memory limit), and then the oldest are dropped.
const OUTBOX_STREAM_BOUND: StreamBound = { events: 100_000 }
// Events one take moves from the outbox stream to their subscribers at most.
const FAN_OUT_BATCH = 1_000
// Dead letters one script gives back to delivery at most, so that no redelivery holds Redis for long.
const REDELIVERY_BATCH = 100

/**
 * The outbox on Redis: the item scripts append each event to a stream; a take moves the stream's events to a sorted
 * set of due deliveries per subscriber (scored by when each may be taken), then leases the due ones to the taker.
 * A delivery whose taker died stays leased until its lease ends, then any instance takes it again; a retry's wait is
 * its score. A take fans out to the subscribers of the instance that takes: every instance has the same WEBHOOKS.
 * A listing's subscriber (a sandbox's receiver) is followed where its cursor says, which its sandbox sets
 * (LISTING_END): its take fans out to it alone.
 */
export class RedisOutbox implements Outbox {
  readonly durable = true
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  // For each subscriber: its channels (space-separated), due, events, dropped and traceparents keys, as the take
  // script reads them; and all of them, one after another.
  readonly #subscribers = new Map<string, string[]>()
  #fannedOutTo: string[] = []
  readonly #listeners: Array<(event: OutboxEvent) => void> = []
  readonly #bounds: Required<Omit<RedisOutboxBounds, 'stream'>>
  readonly #streamBound: string
  readonly #listed: boolean

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, { stream = OUTBOX_STREAM_BOUND, ...bounds }: RedisOutboxBounds) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#bounds = { deadLetters: DEAD_LETTERS, deadLetterBytes: DEAD_LETTER_BYTES, ...bounds }
    this.#listed = stream.bytes !== undefined
    this.#streamBound = stream.bytes === undefined ? String(stream.events) : `${stream.events} ${stream.bytes}`
  }

  /** A change's event as its script appends it to this outbox's stream (APPEND_EVENT). */
  eventArguments (event: OutboxEvent | undefined): EventArguments {
    if (event === undefined) return []
    const { id, channel, body, traceparent } = event
    return traceparent === undefined ? [id, channel, body, this.#streamBound] : [id, channel, body, this.#streamBound, traceparent]
  }

  /** Tells this process's listeners of an event its item store has just recorded. */
  recorded (event: OutboxEvent | undefined): void {
    if (event !== undefined) for (const listener of this.#listeners) listener(event)
  }

  /** A listing has one subscriber at a time (its sandbox's receiver): a new one takes the place of the one before. */
  async subscribe (subscriber: string, channels: readonly string[]): Promise<void> {
    if (this.#subscribers.has(subscriber)) return
    if (this.#listed) this.#subscribers.clear()
    const keys = webhookKeys(this.#keys, subscriber)
    this.#subscribers.set(subscriber, [channels.join(' '), keys.due, keys.events, keys.dropped, keys.traceparents, keys.pendingBytes])
    this.#fannedOutTo = [...this.#subscribers.values()].flat()
  }

  /** Forgets the subscriber with whatever it had pending and dead-lettered, and its cursor: no take delivers it more. */
  async unsubscribe (subscriber: string): Promise<void> {
    this.#subscribers.delete(subscriber)
    this.#fannedOutTo = [...this.#subscribers.values()].flat()
    await call(this.#redis.unlink(...Object.values(webhookKeys(this.#keys, subscriber))))
  }

  onRecorded (listener: (event: OutboxEvent) => void): void {
    this.#listeners.push(listener)
  }

  async take (subscriber: string, now: number, limit: number, leaseMs: number): Promise<Taken> {
    const keys = webhookKeys(this.#keys, subscriber)
    const [dropped, ...taken] = await call(this.#redis.takeDeliveries(this.#keys.outbox, keys.due, keys.events, keys.attempts, keys.dropped,
      keys.traceparents, keys.cursor, now, limit, leaseMs, FAN_OUT_BATCH, this.#bounds.deliveries, this.#listed ? 'listed' : '', this.#bounds.deliveryBytes, ...this.#fannedOutTo))
    const deliveries: Delivery[] = []
    for (let index = 0; index + 3 < taken.length; index += 4) {
      const [id, attempt, stored, traceparent] = [String(taken[index]), Number(taken[index + 1]), String(taken[index + 2]), String(taken[index + 3])]
      const space = stored.indexOf(' ')
      const event = { id, channel: stored.slice(0, space), body: stored.slice(space + 1) }
      deliveries.push({ event: traceparent === '' ? event : { ...event, traceparent }, attempt })
    }
    return { deliveries, dropped }
  }

  async settle (subscriber: string, delivery: Delivery, retryAt?: number): Promise<void> {
    const keys = webhookKeys(this.#keys, subscriber)
    await call(this.#redis.settleDelivery(keys.due, keys.events, keys.attempts, keys.traceparents, keys.pendingBytes, delivery.event.id, retryAt ?? ''))
  }

  async pending (subscriber: string): Promise<number> {
    return await call(this.#redis.zcard(webhookKeys(this.#keys, subscriber).due))
  }

  async deadLetter (subscriber: string, delivery: Delivery, failure: string, now: number): Promise<number> {
    const keys = webhookKeys(this.#keys, subscriber)
    return await call(this.#redis.deadLetterDelivery(keys.due, keys.events, keys.attempts, keys.traceparents, keys.pendingBytes, keys.deadLetters, keys.deadLetterEvents,
      keys.deadLetterOrder, keys.deadLetterBytes, keys.deadLetterPosition, delivery.event.id, delivery.attempt, failure, now, this.#bounds.deadLetters,
      this.#bounds.deadLetterBytes))
  }

  async deadLetters (subscriber: string, { after, limit, bodyBytes }: DeadLetterPage): Promise<DeadLetterList> {
    const keys = webhookKeys(this.#keys, subscriber)
    const [total, placed] = await transaction(this.#redis.multi().zcard(keys.deadLetterOrder)
      .zrange(keys.deadLetterOrder, `(${after}`, '+inf', 'BYSCORE', 'LIMIT', 0, limit + 1, 'WITHSCORES')) as [number, string[]]
    const letters = scored(placed)
    const ids = letters.map(({ member }) => member)
    if (ids.length === 0) return { deadLetters: [], total }
    // Each one's fields, and its event's size.
    const reads = this.#redis.multi().hmget(keys.deadLetters, ...ids)
    for (const eventId of ids) reads.hstrlen(keys.deadLetterEvents, eventId)
    const [stored, ...sizes] = await transaction(reads) as [Array<string | null>, ...number[]]
    const candidates = letters.map(({ member, score }, index) => ({ eventId: member, position: score, json: stored[index], eventBytes: sizes[index]! }))
    const { listed, more } = deadLetterPage(candidates.map(({ eventBytes }) => eventBytes), limit, bodyBytes)
    const page = candidates.slice(0, listed)
    const bodies = bodyBytes === undefined ? [] : await call(this.#redis.hmget(keys.deadLetterEvents, ...page.map(({ eventId }) => eventId)))
    // One given back to delivery while the page is read (its fields or its event gone) is left out.
    const deadLetters = page.map((letter, index) => ({ ...letter, body: bodies[index] }))
      .filter((letter): letter is typeof letter & { json: string, body: string | undefined } => letter.json !== null && letter.body !== null)
      .map(({ json, body, ...letter }): DeadLetter => {
        const { channel, attempts, failure, failedAt } = JSON.parse(json) as StoredDeadLetter
        return { ...letter, channel, attempts, failure, failedAt, ...(body === undefined ? {} : { body }) }
      })
    return more ? { deadLetters, total, next: deadLetters.at(-1)?.position ?? after } : { deadLetters, total }
  }

  async redeliver (subscriber: string, eventIds: readonly string[] | undefined, now: number): Promise<number> {
    const keys = webhookKeys(this.#keys, subscriber)
    let redelivered = 0
    // In batches: the given ids, or the oldest dead letters until none is left (at most DEAD_LETTERS of them).
    for (let first = 0; first < (eventIds?.length ?? this.#bounds.deadLetters); first += REDELIVERY_BATCH) {
      const batch = eventIds?.slice(first, first + REDELIVERY_BATCH) ?? []
      const [count, full] = await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.redeliverDeadLetters(keys.due, keys.events, keys.attempts,
        keys.traceparents, keys.pendingBytes, keys.deadLetters, keys.deadLetterEvents, keys.deadLetterOrder, keys.deadLetterBytes, deadline, outcomeKey, now,
        this.#bounds.deliveries, this.#bounds.deliveryBytes, REDELIVERY_BATCH, ...batch))
      redelivered += count
      if (full === 1 || (eventIds === undefined && count < REDELIVERY_BATCH)) break
    }
    return redelivered
  }
}
