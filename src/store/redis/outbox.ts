import type { Redis, Result } from 'ioredis'
import type { Delivery, Outbox, OutboxEvent, Taken } from '../store.js'
import { call, type Script } from './commands.js'
import { type RedisKeys, webhookKeys } from './keys.js'

// Appends a change's event to the outbox stream, in the script that makes the change (items.ts), when it was given
// one: ARGV[first..first+3] = event id, channel, body, the stream's bound.
export const APPEND_EVENT = `
local function appendEvent (outbox, first)
  if not ARGV[first] then return end
  redis.call('XADD', outbox, 'MAXLEN', '~', ARGV[first + 3], '*', 'id', ARGV[first], 'channel', ARGV[first + 1], 'body', ARGV[first + 2])
end
`

export const outboxScripts = {
  // KEYS: outbox, and this subscriber's due deliveries, events, attempts and dropped count. ARGV: now (ms), most to
  // take, lease (ms), most events to fan out, most deliveries a subscriber keeps, then for each subscriber its
  // channels (space-separated) and its due, events and dropped keys. First moves events from the outbox stream to
  // every subscriber of their channel (a delivery is due from the moment its event was recorded); then takes this
  // subscriber's due deliveries, each leased until now + lease. {dropped, event id, attempt, "channel body", ...}.
  takeDeliveries: {
    numberOfKeys: 5,
    lua: `
local now = tonumber(ARGV[1])
local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[4])
if #entries > 0 then
  local fannedOut = {}
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local eventId, channel, body = fields[2], fields[4], fields[6]
    -- Scored by when it was recorded, the stream id's milliseconds and, in thousandths, its sequence: oldest first.
    local ms, sequence = string.match(entry[1], '^(%d+)-(%d+)$')
    local recordedAt = ms .. '.' .. string.format('%03d', math.min(tonumber(sequence), 999))
    for i = 6, #ARGV, 4 do
      if string.find(' ' .. ARGV[i] .. ' ', ' ' .. channel .. ' ', 1, true) then
        local due, events, dropped = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
        if redis.call('ZCARD', due) >= tonumber(ARGV[5]) then
          redis.call('INCR', dropped)
        elseif redis.call('ZADD', due, 'NX', recordedAt, eventId) == 1 then
          redis.call('HSET', events, eventId, channel .. ' ' .. body)
        end
      end
    end
    fannedOut[#fannedOut + 1] = entry[1]
  end
  redis.call('XDEL', KEYS[1], unpack(fannedOut))
end
local taken = {tonumber(redis.call('GETDEL', KEYS[5]) or '0')}
local leaseEnds = now + tonumber(ARGV[3])
for _, eventId in ipairs(redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[2])) do
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
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    takeDeliveries (outbox: string, due: string, events: string, attempts: string, dropped: string, now: number, limit: number, leaseMs: number,
      fanOut: number, maxPending: number, ...subscribers: string[]): Result<[number, ...Array<string | number>], Context>
    settleDelivery (due: string, events: string, attempts: string, eventId: string, retryAt: number | ''): Result<1, Context>
  }
}

/** A change's event for its script (APPEND_EVENT), or nothing when the change announces none. */
export type EventArguments = [] | [id: string, channel: string, body: string, outboxBound: number]

// Events the outbox stream keeps at most (about, trimmed by whole nodes) while no instance has fanned them out to
// their subscribers yet; an instance does so within a poll of the webhooks plugin, so this is only reached while no
// instance delivers (all of them down, or Redis near its memory limit), and then the oldest are dropped.
const OUTBOX_STREAM_BOUND = 100_000
// Events one take moves from the outbox stream to their subscribers at most.
const FAN_OUT_BATCH = 1_000

export const eventArguments = (event: OutboxEvent | undefined): EventArguments =>
  event === undefined ? [] : [event.id, event.channel, event.body, OUTBOX_STREAM_BOUND]

/**
 * The outbox on Redis: the item scripts append each event to a stream; a take moves the stream's events to a sorted
 * set of due deliveries per subscriber (scored by when each may be taken), then leases the due ones to the taker.
 * A delivery whose taker died stays leased until its lease ends, then any instance takes it again; a retry's wait is
 * its score. A take fans out to the subscribers of the instance that takes: every instance has the same WEBHOOKS.
 */
export class RedisOutbox implements Outbox {
  readonly durable = true
  readonly #redis: Redis
  readonly #keys: RedisKeys
  // For each subscriber: its channels (space-separated), due, events and dropped keys, as the take script reads them.
  readonly #subscribers: string[] = []
  readonly #subscribed = new Set<string>()
  readonly #listeners: Array<(event: OutboxEvent) => void> = []
  readonly #maxPending: number

  constructor (redis: Redis, keys: RedisKeys, maxPending: number) {
    this.#redis = redis
    this.#keys = keys
    this.#maxPending = maxPending
  }

  /** Tells this process's listeners of an event its item store has just recorded. */
  recorded (event: OutboxEvent | undefined): void {
    if (event !== undefined) for (const listener of this.#listeners) listener(event)
  }

  async subscribe (subscriber: string, channels: readonly string[]): Promise<void> {
    if (this.#subscribed.has(subscriber)) return
    this.#subscribed.add(subscriber)
    const keys = webhookKeys(this.#keys, subscriber)
    this.#subscribers.push(channels.join(' '), keys.due, keys.events, keys.dropped)
  }

  onRecorded (listener: (event: OutboxEvent) => void): void {
    this.#listeners.push(listener)
  }

  async take (subscriber: string, now: number, limit: number, leaseMs: number): Promise<Taken> {
    const keys = webhookKeys(this.#keys, subscriber)
    const [dropped, ...taken] = await call(this.#redis.takeDeliveries(this.#keys.outbox, keys.due, keys.events, keys.attempts, keys.dropped,
      now, limit, leaseMs, FAN_OUT_BATCH, this.#maxPending, ...this.#subscribers))
    const deliveries: Delivery[] = []
    for (let index = 0; index + 2 < taken.length; index += 3) {
      const [id, attempt, stored] = [String(taken[index]), Number(taken[index + 1]), String(taken[index + 2])]
      const space = stored.indexOf(' ')
      deliveries.push({ event: { id, channel: stored.slice(0, space), body: stored.slice(space + 1) }, attempt })
    }
    return { deliveries, dropped }
  }

  async settle (subscriber: string, delivery: Delivery, retryAt?: number): Promise<void> {
    const keys = webhookKeys(this.#keys, subscriber)
    await call(this.#redis.settleDelivery(keys.due, keys.events, keys.attempts, delivery.event.id, retryAt ?? ''))
  }

  async pending (subscriber: string): Promise<number> {
    return await call(this.#redis.zcard(webhookKeys(this.#keys, subscriber).due))
  }
}
