import type { Result } from 'ioredis'
import { FifoMap } from 'toad-cache'
import { randomUuid } from '../../runtime/uuid.js'
import {
  type Sandbox, SANDBOX_CLOCK_AHEAD_MS, SANDBOX_EVENT_CHARACTERS, SANDBOX_EVENTS, type SandboxBounds, type SandboxClockReading, type SandboxEvent, type Sandboxes,
  type SandboxStoreOptions
} from '../sandboxes.js'
import { setCapacity } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import { indexItems } from './items.js'
import { type RedisKeys, redisKeys } from './keys.js'
import { catalogueUnder, type RedisConnection } from './store.js'
import { TrackedSessions } from './tracking.js'
import { type RedisWrites, writeScript } from './writes.js'

// KEYS of every registry script: sandboxes, sandboxFixtures, sandboxUse, sandboxLeftovers (keys.ts).
const REGISTRY_KEYS = 4

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
return 1`)
  },
  // KEYS: sandboxes, sandboxUse. ARGV: sandbox id, now (ms). The sandbox's "<generation> <clock ahead>", noting it
  // used now; nil when there is none.
  useSandbox: {
    numberOfKeys: 2,
    lua: `
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return false end
redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
return entry`
  },
  // A write script. ARGV: sandbox id. Starts its next generation with its clock the service's, the one before left
  // over to be deleted: {the generation before, the fixtures}; nil when there is none.
  resetSandbox: {
    numberOfKeys: REGISTRY_KEYS,
    lua: writeScript('', `
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return refuse(false) end
local generation = tonumber(string.match(entry, '^(%d+)'))
redis.call('HSET', KEYS[1], ARGV[1], (generation + 1) .. ' 0')
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1] .. ':' .. generation)
return {generation, redis.call('HGET', KEYS[2], ARGV[1])}`)
  },
  // A write script. ARGV: sandbox id. Forgets the sandbox, its generation left over to be deleted: that generation;
  // nil when there is none.
  deleteSandbox: {
    numberOfKeys: REGISTRY_KEYS,
    lua: writeScript('', `
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return refuse(false) end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local generation = tonumber(string.match(entry, '^(%d+)'))
redis.call('SADD', KEYS[4], ARGV[1] .. ':' .. generation)
return generation`)
  },
  // A write script. ARGV: sandbox id, ms to move its clock on, how far ahead it may run at most. {its generation,
  // how far ahead it runs now}; 0, moving nothing, past the most; nil when there is none.
  advanceSandboxClock: {
    numberOfKeys: REGISTRY_KEYS,
    lua: writeScript('', `
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return refuse(false) end
local generation, ahead = string.match(entry, '^(%d+) (%d+)$')
ahead = tonumber(ahead) + tonumber(ARGV[2])
if ahead > tonumber(ARGV[3]) then return refuse(0) end
redis.call('HSET', KEYS[1], ARGV[1], generation .. ' ' .. string.format('%d', ahead))
return {tonumber(generation), ahead}`)
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
  },
  // KEYS: a sandbox's outbox stream (APPEND_EVENT keeps it exactly, trimmed from its oldest). ARGV: after which place
  // (from 1), how many at most. {the first one's place, the bodies, oldest first}; {} when there are none.
  sandboxEvents: {
    numberOfKeys: 1,
    lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added, length
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] elseif info[i] == 'length' then length = info[i + 1] end
end
local first = added - length + 1
local skip = math.max(0, tonumber(ARGV[1]) + 1 - first)
if skip >= length then return {} end
local listed = {first + skip}
for i, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', skip + tonumber(ARGV[2]))) do
  if i > skip then listed[#listed + 1] = entry[2][6] end
end
return listed`
  }
} as const satisfies Record<string, Script>

type RegistryKeys = [sandboxes: string, fixtures: string, use: string, leftovers: string]

declare module 'ioredis' {
  interface RedisCommander<Context> {
    createSandbox (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string, fixtures: string, limit: number]): Result<0 | 1, Context>
    useSandbox (sandboxes: string, use: string, id: string, now: number): Result<string | null, Context>
    resetSandbox (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string]): Result<[number, string] | null, Context>
    deleteSandbox (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string]): Result<number | null, Context>
    advanceSandboxClock (...args: [...RegistryKeys, deadline: WriteDeadline, outcomeKey: string, id: string, ms: number, most: number]): Result<0 | [number, number] | null, Context>
    expireSooner (ms: number, ...keys: string[]): Result<number, Context>
    sandboxEvents (outbox: string, after: number, limit: number): Result<[number, ...string[]] | [], Context>
  }
}

// Keys a SCAN of a sandbox's keys (to delete them, or to move their expiries) asks for at a time.
const KEYS_PER_SCAN = 1000
// Idle sandboxes one sweep deletes at most.
const IDLE_DELETED_PER_SWEEP = 100

/** A glob that matches `prefix` and what follows it, whatever the prefix holds. */
const startingWith = (prefix: string): string => `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`

interface Generation extends Sandbox {
  readonly generation: number
  /** How far its clock runs ahead of Redis's, as the last request into it read it. */
  clockAheadMs: number
}

/**
 * Sandboxes kept in Redis beside the service's catalogue, so that every instance serves each of them: a registry
 * (keys.sandboxes, sandboxFixtures, sandboxUse) and each sandbox's catalogue under a prefix of its own and its
 * generation (keys.sandbox), which a reset moves on. Each instance keeps the catalogues of as many sandboxes as may
 * exist (the oldest out first), built on its one connection; a request into a sandbox reads its registry entry (one round trip),
 * which also notes it used. A sandbox's sessions are read from Redis at every request (Redis tracks only the
 * service's for the instance), its events listed from its outbox stream, and its clock moved on by moving the
 * expiries of its keys.
 */
export class RedisSandboxes implements Sandboxes {
  readonly settings: SandboxBounds
  readonly deliversToReceivers = false
  readonly #connection: RedisConnection
  readonly #writes: RedisWrites
  readonly #keys: RedisKeys
  readonly #registry: RegistryKeys
  readonly #options: SandboxStoreOptions
  readonly #available: () => boolean
  readonly #served: FifoMap<Generation>
  // Users this instance keeps copies of, a sandbox: the service's own bound, shared by as many as may exist.
  readonly #cachedUsers: number

  /** `options.cachedUsers`: how many users this instance keeps copies of for the service (they share as many). */
  constructor (connection: RedisConnection, writes: RedisWrites, keys: RedisKeys, bounds: SandboxBounds, options: SandboxStoreOptions & { cachedUsers: number }, available: () => boolean) {
    this.settings = bounds
    this.#connection = connection
    this.#writes = writes
    this.#keys = keys
    this.#registry = [keys.sandboxes, keys.sandboxFixtures, keys.sandboxUse, keys.sandboxLeftovers]
    this.#options = options
    this.#available = available
    this.#served = new FifoMap(bounds.limit)
    this.#cachedUsers = Math.max(1, Math.floor(options.cachedUsers / bounds.limit))
  }

  async count (): Promise<number> {
    return await call(this.#connection.redis.zcard(this.#keys.sandboxUse))
  }

  async create (fixtures: unknown): Promise<Sandbox | undefined> {
    const id = randomUuid()
    const made = await this.#writes.run(async (deadline, outcomeKey) =>
      await this.#connection.redis.createSandbox(...this.#registry, deadline, outcomeKey, id, JSON.stringify(fixtures), this.settings.limit))
    if (made === 0) return undefined
    return await this.#prepared(id, 1)
  }

  async use (id: string): Promise<Sandbox | undefined> {
    return await this.#find(id, { used: true })
  }

  // The sandbox as its registry entry has it now, noted as used now when `used`.
  async #find (id: string, { used }: { used: boolean }): Promise<Generation | undefined> {
    const canonical = id.toLowerCase()
    const { redis, clock } = this.#connection
    const entry = await call(used ? redis.useSandbox(this.#keys.sandboxes, this.#keys.sandboxUse, canonical, clock.now()) : redis.hget(this.#keys.sandboxes, canonical))
    if (entry === null) {
      this.#served.delete(canonical)
      return undefined
    }
    const [generation, clockAheadMs] = entry.split(' ').map(Number) as [number, number]
    const served = this.#served.get(canonical)
    const sandbox = served?.generation === generation ? served : this.#generation(canonical, generation)
    sandbox.clockAheadMs = clockAheadMs
    return sandbox
  }

  async reset (id: string): Promise<{ sandbox: Sandbox, fixtures: unknown } | undefined> {
    const canonical = id.toLowerCase()
    const reset = await this.#writes.run(async (deadline, outcomeKey) => await this.#connection.redis.resetSandbox(...this.#registry, deadline, outcomeKey, canonical))
    if (reset === null) return undefined
    const [before, fixtures] = reset
    await this.#deleteKeys(canonical, before)
    return { sandbox: await this.#prepared(canonical, before + 1), fixtures: JSON.parse(fixtures) as unknown }
  }

  async delete (id: string): Promise<boolean> {
    const canonical = id.toLowerCase()
    const generation = await this.#writes.run(async (deadline, outcomeKey) => await this.#connection.redis.deleteSandbox(...this.#registry, deadline, outcomeKey, canonical))
    if (generation === null) return false
    this.#served.delete(canonical)
    await this.#deleteKeys(canonical, generation)
    return true
  }

  /** Also deletes the keys of generations a reset or a deletion left over, when the instance that made it died first. */
  async deleteIdle (): Promise<string[]> {
    const { redis, clock } = this.#connection
    const idle = await call(redis.zrangebyscore(this.#keys.sandboxUse, '-inf', clock.now() - this.settings.idleMs, 'LIMIT', 0, IDLE_DELETED_PER_SWEEP))
    const deleted: string[] = []
    // Another instance's sweep may delete one first: it is deleted once, by whichever does.
    for (const id of idle) if (await this.delete(id)) deleted.push(id)
    for (const leftover of await call(redis.srandmember(this.#keys.sandboxLeftovers, IDLE_DELETED_PER_SWEEP))) {
      const [id = '', generation] = leftover.split(':')
      await this.#deleteKeys(id, Number(generation))
    }
    return deleted
  }

  async advanceClock (id: string, ms: number): Promise<SandboxClockReading | 'too far' | undefined> {
    const canonical = id.toLowerCase()
    const moved = await this.#writes.run(async (deadline, outcomeKey) =>
      await this.#connection.redis.advanceSandboxClock(...this.#registry, deadline, outcomeKey, canonical, ms, SANDBOX_CLOCK_AHEAD_MS))
    if (moved === null) return undefined
    if (moved === 0) return 'too far'
    const [generation, aheadMs] = moved
    await this.#eachKeyBatch(this.#generationKeys(canonical, generation).prefix, async (keys) => { await call(this.#connection.redis.expireSooner(ms, ...keys)) })
    return { now: this.#connection.clock.now() + aheadMs, aheadMs }
  }

  async events (id: string, after: number, limit: number): Promise<SandboxEvent[] | undefined> {
    const sandbox = await this.#find(id, { used: false })
    if (sandbox === undefined) return undefined
    const { keys } = this.#generationKeys(sandbox.id, sandbox.generation)
    const [first = 0, ...bodies] = await call(this.#connection.redis.sandboxEvents(keys.outbox, after, limit))
    return bodies.map((body, index) => ({ sequence: first + index, body }))
  }

  /** No receiver is kept on Redis (deliversToReceivers): removing one finds none, in a sandbox that exists. */
  async setReceiver (id: string): Promise<boolean> {
    return await this.#find(id, { used: false }) !== undefined
  }

  /** Its catalogues stay in Redis for every instance; this instance's copies go with it. */
  async close (): Promise<void> {
    this.#served.clear()
  }

  #generationKeys (id: string, generation: number): { prefix: string, keys: RedisKeys } {
    const prefix = `${this.#keys.sandbox}${id}:${generation}:`
    return { prefix, keys: redisKeys(prefix) }
  }

  #generation (id: string, generation: number): Generation {
    const { keys } = this.#generationKeys(id, generation)
    const { clock } = this.#connection
    const sandbox: Generation = {
      id,
      generation,
      clockAheadMs: 0,
      store: {
        ...catalogueUnder(this.#connection, keys, {
          writes: this.#writes.ahead(() => sandbox.clockAheadMs),
          now: () => clock.now() + sandbox.clockAheadMs,
          // Never tracked: nothing kept, every session read from Redis.
          sessions: new TrackedSessions(1),
          cachedUsers: this.#cachedUsers,
          maxItemsPerContributor: this.#options.maxItemsPerContributor,
          idempotencyKeys: this.#options.idempotencyKeys,
          maxPendingDeliveries: SANDBOX_EVENTS,
          streamBound: { events: SANDBOX_EVENTS, bytes: SANDBOX_EVENT_CHARACTERS }
        }),
        available: this.#available
      }
    }
    this.#served.set(id, sandbox)
    return sandbox
  }

  // A generation's catalogue made ready to be seeded, as a start prepares the service's: its bounds for accounts set.
  async #prepared (id: string, generation: number): Promise<Sandbox> {
    const { keys } = this.#generationKeys(id, generation)
    const { redis } = this.#connection
    await indexItems(redis, keys)
    // A rig registers as fast as it asks: no pace, within the sandbox's own floors.
    await setCapacity(redis, keys, { ...this.#options.capacity, budgetBytes: this.settings.capacityBytes, registrationRoomMs: 0 })
    return this.#generation(id, generation)
  }

  // Deletes the keys of a generation left over (sandboxLeftovers), and then forgets it.
  async #deleteKeys (id: string, generation: number): Promise<void> {
    const { redis } = this.#connection
    await this.#eachKeyBatch(this.#generationKeys(id, generation).prefix, async (keys) => { await call(redis.unlink(...keys)) })
    await call(redis.srem(this.#keys.sandboxLeftovers, `${id}:${generation}`))
  }

  // Every key under `prefix`, a batch of a SCAN at a time (as orderUsers reads the users): SCAN reads the whole
  // keyspace, KEYS_PER_SCAN at a call.
  async #eachKeyBatch (prefix: string, each: (keys: string[]) => Promise<void>): Promise<void> {
    const match = startingWith(prefix)
    let cursor = '0'
    do {
      const [next, keys] = await call(this.#connection.redis.scan(cursor, 'MATCH', match, 'COUNT', KEYS_PER_SCAN))
      if (keys.length > 0) await each(keys)
      cursor = next
    } while (cursor !== '0')
  }
}
