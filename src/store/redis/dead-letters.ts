import type { Result } from 'ioredis'
import type { Script, WriteDeadline } from './commands.js'
import { writeScript } from './writes.js'

// A subscriber's dead letters on Redis (webhookKeys: dead-letters, dead-letter-events, dead-letter-order,
// dead-letter-bytes, dead-letter-position): the scripts that keep, list and deliver them again, and the room of the
// pending deliveries a redelivery needs, as a fan-out does (outbox.ts).

// src/store/outbox.ts's hasRoom, for the scripts that add a pending delivery: whether the subscriber whose due
// deliveries and pending bytes are `due` and `bytes` has room for one whose `stored` event ("<channel> <body>", whose
// length is deliveryBytes) is so long, within `most` deliveries and `mostBytes` bytes.
export const PENDING_ROOM = `
local function hasRoom (due, bytes, stored, most, mostBytes)
  return redis.call('ZCARD', due) < most and tonumber(redis.call('GET', bytes) or '0') + #stored <= mostBytes
end
`

export const deadLetterScripts = {
  // KEYS: a subscriber's due deliveries, events, attempts, traceparents, pending bytes, and its dead letters' keys
  // (DeadLetterKeys). ARGV: event id, attempts, failure, when (ms), most dead letters kept, most bytes of their events kept. Ends the
  // delivery and keeps it as the newest dead letter; pushes out the oldest past either bound. How many it pushed out;
  // nothing when the delivery had ended already (another instance took it over once its lease ended, and settled it).
  deadLetterDelivery: {
    numberOfKeys: 10,
    lua: `
local stored = redis.call('HGET', KEYS[2], ARGV[1])
if not stored then return 0 end
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('DECRBY', KEYS[5], #stored) end
local traceparent = redis.call('HGET', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local space = string.find(stored, ' ', 1, true)
local body = string.sub(stored, space + 1)
redis.call('HSET', KEYS[6], ARGV[1], cjson.encode({
  channel = string.sub(stored, 1, space - 1), traceparent = traceparent or nil,
  attempts = tonumber(ARGV[2]), failure = ARGV[3], failedAt = tonumber(ARGV[4])
}))
redis.call('HSET', KEYS[7], ARGV[1], body)
redis.call('ZADD', KEYS[8], redis.call('INCR', KEYS[10]), ARGV[1])
local bytes = redis.call('INCRBY', KEYS[9], #body)
local kept, most, mostBytes = redis.call('ZCARD', KEYS[8]), tonumber(ARGV[5]), tonumber(ARGV[6])
local pushedOut = 0
while kept > 1 and (kept > most or bytes > mostBytes) do
  local oldest = redis.call('ZPOPMIN', KEYS[8])[1]
  bytes = redis.call('DECRBY', KEYS[9], redis.call('HSTRLEN', KEYS[7], oldest))
  redis.call('HDEL', KEYS[6], oldest)
  redis.call('HDEL', KEYS[7], oldest)
  kept = kept - 1
  pushedOut = pushedOut + 1
end
return pushedOut`
  },
  // A write script (writeScript), so that a redelivery whose reply is lost is answered as what it did. KEYS: a
  // subscriber's due deliveries, events, attempts, traceparents, pending bytes, and its dead letters, their events,
  // order and bytes. ARGV: now (ms), most deliveries a subscriber keeps, most bytes of their events, most to give
  // back when no ids follow, then the event ids to deliver again (none: the oldest dead letters). Each goes back to
  // the due deliveries as a new one, while there is room (PENDING_ROOM). {how many went, 1 when it stopped for want
  // of room}.
  redeliverDeadLetters: {
    numberOfKeys: 9,
    lua: writeScript(PENDING_ROOM, `
local ids = {}
for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', KEYS[8], 0, tonumber(ARGV[4]) - 1) end
local redelivered = 0
for _, eventId in ipairs(ids) do
  local json = redis.call('HGET', KEYS[6], eventId)
  if json then
    local letter = cjson.decode(json)
    local stored = letter.channel .. ' ' .. redis.call('HGET', KEYS[7], eventId)
    if not hasRoom(KEYS[1], KEYS[5], stored, tonumber(ARGV[2]), tonumber(ARGV[3])) then
      if redelivered == 0 then return refuse({0, 1}) end
      return {redelivered, 1}
    end
    redis.call('ZADD', KEYS[1], ARGV[1], eventId)
    redis.call('HSET', KEYS[2], eventId, stored)
    if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('INCRBY', KEYS[5], #stored) end
    redis.call('HDEL', KEYS[3], eventId)
    if letter.traceparent then redis.call('HSET', KEYS[4], eventId, letter.traceparent) end
    redis.call('DECRBY', KEYS[9], #stored - #letter.channel - 1)
    redis.call('HDEL', KEYS[6], eventId)
    redis.call('HDEL', KEYS[7], eventId)
    redis.call('ZREM', KEYS[8], eventId)
    redelivered = redelivered + 1
  end
end
if redelivered == 0 then return refuse({0, 0}) end
return {redelivered, 0}`)
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    deadLetterDelivery (due: string, events: string, attempts: string, traceparents: string, pendingBytes: string, ...deadLetterKeys: [...DeadLetterKeys,
      eventId: string, attemptsMade: number, failure: string, failedAt: number, most: number, mostBytes: number]): Result<number, Context>
    // The scripts change a dead letter, its event and its place in the order together.
    redeliverDeadLetters (due: string, events: string, attempts: string, traceparents: string, pendingBytes: string, ...deadLetterKeys: [...RedeliveryKeys,
      deadline: WriteDeadline, outcomeKey: string, now: number, maxPending: number, maxPendingBytes: number, batch: number, ...eventIds: string[]]): Result<[redelivered: number, full: 0 | 1], Context>
  }
}

/** A dead letter as deadLetterDelivery stores it, beside its event. */
export interface StoredDeadLetter {
  channel: string
  traceparent?: string
  attempts: number
  failure: string
  failedAt: number
}

export type DeadLetterKeys = [deadLetters: string, deadLetterEvents: string, deadLetterOrder: string, deadLetterBytes: string, deadLetterPosition: string]
export type RedeliveryKeys = [deadLetters: string, deadLetterEvents: string, deadLetterOrder: string, deadLetterBytes: string]
