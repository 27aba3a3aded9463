import type { Result } from 'ioredis'
import type { SandboxReceiver } from '../sandboxes.js'
import type { Script, WriteDeadline } from './commands.js'
import { type RedisKeys, redisKeys, webhookKeys } from './keys.js'
import { LISTING_END } from './outbox.js'
import { writeScript } from './writes.js'

// The sandboxes' registry, which every instance reads: each sandbox's entry, fixtures, last use, receiver and the
// generations left over to be deleted (keys.ts); and the scripts of the sandboxes: those that change the registry
// where a guarded commit cannot (a create counted against the limit, a receiver's cursor placed at its stream's end),
// and the one that moves a generation's keys' expiries.

// KEYS of every registry script: sandboxes, sandboxFixtures, sandboxUse, sandboxLeftovers, sandboxReceivers,
// sandboxReceiversVersion and sandboxCreated (keys.ts).
const REGISTRY_KEYS = 7

// What stands for the generation and the subscriber in the names of a generation's keys that a script names itself
// (`named`), once it has read the generation: a script may use keys it is not given on one Redis server, which the
// store is on.
export const GENERATION = '{generation}'
export const SUBSCRIBER = '{subscriber}'
const GENERATION_KEY_NAMES = `
local function named (name, generation, subscriber)
  return (string.gsub(string.gsub(name, '${GENERATION}', generation), '${SUBSCRIBER}', subscriber))
end
`
export type GenerationKeyNames = [outbox: string, cursor: string]

/** Every key of a sandbox's generation is under `prefix`, named as `keys` names them. */
export function generationKeys (keys: RedisKeys, id: string, generation: number | typeof GENERATION): { prefix: string, keys: RedisKeys } {
  const prefix = `${keys.sandbox}${id}:${generation}:`
  return { prefix, keys: redisKeys(prefix) }
}

/** The names of the keys of a generation a script reads itself (GENERATION_KEY_NAMES): its outbox stream, and a subscriber's cursor. */
export function generationKeyNames (keys: RedisKeys, id: string): GenerationKeyNames {
  const { keys: generation } = generationKeys(keys, id, GENERATION)
  return [generation.outbox, webhookKeys(generation, SUBSCRIBER).cursor]
}

export const sandboxScripts = {
  // A write script (writeScript). ARGV: sandbox id, fixtures (JSON), how many may exist. 1 when made; 0, making
  // none, when as many exist.
  createSandbox: {
    numberOfKeys: REGISTRY_KEYS,
    lua: writeScript('', `
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[3]) then return refuse(0) end
redis.call('HSET', KEYS[1], ARGV[1], '1 0')
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('HSET', KEYS[7], ARGV[1], now)
return 1`)
  },
  // A write script. ARGV: sandbox id, its receiver (JSON, StoredReceiver; '' for none), then its generation's key
  // names (GENERATION_KEY_NAMES). The receiver's cursor starts at the events' end: it is sent what is recorded from
  // then on. {its generation, the receiver it had or ''}; nil when there is none.
  setSandboxReceiver: {
    numberOfKeys: REGISTRY_KEYS,
    lua: writeScript(LISTING_END + GENERATION_KEY_NAMES, `
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return refuse(false) end
local generation = tonumber(string.match(entry, '^(%d+)'))
local before = redis.call('HGET', KEYS[5], ARGV[1]) or ''
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[5], ARGV[1])
else
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
  redis.call('SET', named(ARGV[4], generation, cjson.decode(ARGV[2]).subscriber), listingEnd(named(ARGV[3], generation, '')))
end
redis.call('INCR', KEYS[6])
return {generation, before}`)
  },
  // ARGV: by how much (ms) the clock of a sandbox moved on, then keys of it, found by a SCAN (so named in ARGV, as a
  // script on one Redis server may). Each key Redis expires, it expires so much sooner; one whose time that leaves
  // none is deleted.
  expireSooner: {
    numberOfKeys: 0,
    lua: `
local by = tonumber(ARGV[1])
for i = 2, #ARGV do
  local ttl = redis.call('PTTL', ARGV[i])
  if ttl > by then redis.call('PEXPIRE', ARGV[i], ttl - by) elseif ttl >= 0 then redis.call('DEL', ARGV[i]) end
end
return #ARGV - 1`
  }
} as const satisfies Record<string, Script>

export type RegistryKeys = [sandboxes: string, fixtures: string, use: string, leftovers: string, receivers: string, receiversVersion: string, created: string]

declare module 'ioredis' {
  interface RedisCommander<Context> {
    createSandbox (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string, fixtures: string, limit: number]): Result<0 | 1, Context>
    setSandboxReceiver (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string, receiver: string, ...names: GenerationKeyNames]): Result<[number, string] | null, Context>
    expireSooner (ms: number, ...keys: string[]): Result<number, Context>
  }
}

/** A sandbox's receiver as sandboxReceivers keeps it: where its events go, and the subscriber of its outbox they are delivered as. */
export interface StoredReceiver extends SandboxReceiver {
  readonly subscriber: string
}

/** A sandbox's entry in the registry (keys.sandboxes: "<generation> <clock ahead>"). */
export interface RegistryEntry {
  readonly generation: number
  /** How far its clock runs ahead of Redis's (ms). */
  readonly aheadMs: number
}

/** The entry's text. */
export const registryEntryText = ({ generation, aheadMs }: RegistryEntry): string => `${generation} ${aheadMs}`

export const registryEntry = (entry: string): RegistryEntry => {
  const [generation, aheadMs] = entry.split(' ').map(Number) as [number, number]
  return { generation, aheadMs }
}

/** The keys of the registry, in the order its scripts take them. */
export const registryKeys = (keys: RedisKeys): RegistryKeys =>
  [keys.sandboxes, keys.sandboxFixtures, keys.sandboxUse, keys.sandboxLeftovers, keys.sandboxReceivers, keys.sandboxReceiversVersion, keys.sandboxCreated]
