import { FifoMap } from 'toad-cache'
import { randomUuid } from '../../runtime/uuid.js'
import type { JournalPosition, JournalRecord, KeptEntry } from '../../domain/journal.js'
import { clockAdvanced, pageById } from '../../domain/sandboxes.js'
import {
  KEYS_PER_SANDBOX_RATE_LIMIT, type Sandbox, SANDBOX_EVENT_BYTES, SANDBOX_EVENTS, SANDBOX_OUTBOX_BOUNDS, type SandboxBounds, type SandboxClockReading,
  type SandboxEvent, type SandboxPage, type SandboxReceiver, type Sandboxes, type SandboxStoreOptions, type SandboxWatcher
} from '../sandboxes.js'
import { OutcomeUnknownError } from '../store.js'
import { call, eachKeyBatch, scored } from './commands.js'
import { afterNow, Change, commit, retried, STALE } from './commit.js'
import { indexItems } from './items.js'
import { type RedisKeys, webhookKeys } from './keys.js'
import { listedAfter, type RedisOutbox } from './outbox.js'
import { journalEmptied, RedisJournals } from './sandbox-journal.js'
import { DeliveredReceivers } from './sandbox-receivers.js'
import { generationKeyNames, generationKeys, type RegistryEntry, registryEntry, registryEntryText, type RegistryKeys, registryKeys, type StoredReceiver } from './sandbox-registry.js'
import { catalogueUnder, type RedisConnection } from './store.js'
import { TrackedSessions } from './tracking.js'
import type { RedisWrites } from './writes.js'

// Idle sandboxes one sweep deletes at most.
const IDLE_DELETED_PER_SWEEP = 100

interface Generation extends Sandbox {
  readonly generation: number
  readonly outbox: RedisOutbox
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
  readonly #connection: RedisConnection
  readonly #writes: RedisWrites
  readonly #keys: RedisKeys
  readonly #registry: RegistryKeys
  readonly #options: SandboxStoreOptions
  readonly #available: () => boolean
  readonly #served: FifoMap<Generation>
  // Users this instance keeps copies of, and characters of item texts, a sandbox: the service's own bounds, shared by
  // as many as may exist.
  readonly #cachedUsers: number
  readonly #itemTextCharacters: number
  readonly #receivers: DeliveredReceivers
  // Sandboxes whose making failed, and their deletion with it: deleted before this instance's next create. As many
  // as the limit at most, the oldest forgotten past it (it idles out).
  readonly #abandoned: FifoMap<true>
  readonly #journals: RedisJournals

  /**
   * `options.cachedUsers`, `options.itemTextCharacters`: how many users, and characters of item texts, this instance
   * keeps for the service (they share as many);
   * `options.journalListeners`: told of each change Redis tells of to a sandbox's journal.
   */
  constructor (connection: RedisConnection, writes: RedisWrites, keys: RedisKeys, bounds: SandboxBounds,
    options: SandboxStoreOptions & { cachedUsers: number, itemTextCharacters: number, journalListeners: Array<(id: string) => void> },
    available: () => boolean, watcher: SandboxWatcher) {
    this.settings = bounds
    this.#connection = connection
    this.#writes = writes
    this.#keys = keys
    this.#registry = registryKeys(keys)
    this.#options = options
    this.#available = available
    this.#served = new FifoMap(bounds.limit)
    this.#abandoned = new FifoMap(bounds.limit)
    this.#cachedUsers = Math.max(1, Math.floor(options.cachedUsers / bounds.limit))
    this.#itemTextCharacters = Math.floor(options.itemTextCharacters / bounds.limit)
    this.#journals = new RedisJournals(connection, writes, keys, options.journalListeners)
    this.#receivers = new DeliveredReceivers(connection, keys, watcher, (id, generation) => this.#generationAt(id, generation))
  }

  async count (): Promise<number> {
    return await call(this.#connection.redis.zcard(this.#keys.sandboxUse))
  }

  /** Reads every id with its last use (as many as the limit at most), to list them by id. */
  async list (after: string | undefined, limit: number): Promise<SandboxPage> {
    const { redis } = this.#connection
    const used = await call(redis.zrange(this.#keys.sandboxUse, '0', '-1', 'WITHSCORES'))
    const usedAt = new Map(scored(used).map(({ member, score }) => [member, score]))
    const { listed, next } = pageById(usedAt.keys(), after, limit)
    const [entries, created] = listed.length === 0
      ? [[], []]
      : await Promise.all([call(redis.hmget(this.#keys.sandboxes, ...listed)), call(redis.hmget(this.#keys.sandboxCreated, ...listed))])
    // One deleted since its id was read has no entry, and is left out.
    const live = listed.map((id, index) => ({ id, entry: entries[index], createdAt: created[index] }))
      .filter((sandbox): sandbox is { id: string, entry: string, createdAt: string | null | undefined } => typeof sandbox.entry === 'string')
    const sandboxes = await Promise.all(live.map(async ({ id, entry, createdAt }) => ({
      id,
      createdAt: typeof createdAt === 'string' ? Number(createdAt) : undefined,
      usedAt: usedAt.get(id)!,
      heldBytes: (await this.#generationAt(id, registryEntry(entry).generation).store.usage()).heldBytes
    })))
    return { sandboxes, next }
  }

  async create (fixtures: unknown): Promise<Sandbox | undefined> {
    for (const abandoned of [...this.#abandoned.keys()]) await this.abandon(abandoned)
    const id = randomUuid()
    const made = await this.#writes.run(async (deadline, outcomeKey) =>
      await this.#connection.redis.createSandbox(...this.#registry, deadline, outcomeKey, id, JSON.stringify(fixtures), this.settings.limit))
    if (made === 0) return undefined
    try {
      return await this.#prepared(id, 1)
    } catch (error) {
      await this.abandon(id)
      throw error
    }
  }

  async abandon (id: string): Promise<void> {
    try {
      await this.delete(id)
      this.#abandoned.delete(id)
    } catch (err) {
      this.#abandoned.set(id, true)
      this.#connection.logger.warn({ err, sandboxId: id }, 'a sandbox whose making failed is not deleted yet; this instance\'s next create deletes it first')
    }
  }

  async use (id: string): Promise<Sandbox | undefined> {
    return await this.#find(id, { used: true })
  }

  // The sandbox as its registry entry has it now, noted as used now when `used`.
  async #find (id: string, { used }: { used: boolean }): Promise<Generation | undefined> {
    const canonical = id.toLowerCase()
    const { redis, clock } = this.#connection
    // Sent together, one round trip: a use noted of a sandbox that has no entry notes nothing (XX: only one listed).
    const [entry] = await Promise.all([call(redis.hget(this.#keys.sandboxes, canonical)), used ? call(redis.zadd(this.#keys.sandboxUse, 'XX', clock.now(), canonical)) : undefined])
    if (entry === null) {
      this.#served.delete(canonical)
      return undefined
    }
    const { generation, aheadMs } = registryEntry(entry)
    const sandbox = this.#generationAt(canonical, generation)
    sandbox.clockAheadMs = aheadMs
    return sandbox
  }

  async reset (id: string): Promise<{ sandbox: Sandbox, fixtures: unknown } | undefined> {
    const canonical = id.toLowerCase()
    const keys = this.#keys
    // Kept as they were made, while the sandbox lives.
    const fixtures = await call(this.#connection.redis.hget(keys.sandboxFixtures, canonical))
    // Its next generation, its clock the service's, the one before left over to be deleted, its receiver kept with
    // its cursor at that generation's first event.
    const reset = await this.#changed(canonical, ({ generation }, receiver) => {
      const change = journalEmptied(new Change(), keys, canonical).write('HSET', keys.sandboxes, canonical, registryEntryText({ generation: generation + 1, aheadMs: 0 }))
        .write('ZADD', keys.sandboxUse, afterNow(0), canonical).write('SADD', keys.sandboxLeftovers, `${canonical}:${generation}`)
      if (receiver !== null) {
        const { keys: next } = generationKeys(this.#keys, canonical, generation + 1)
        change.write('SET', webhookKeys(next, (JSON.parse(receiver) as StoredReceiver).subscriber).cursor, '0-0 0').write('INCR', keys.sandboxReceiversVersion)
      }
      return change
    })
    if (reset === undefined) return undefined
    const { entry: { generation: before }, receiver } = reset
    await this.#tidy(this.#deleteKeys(canonical, before))
    // The reset is made, and cannot be taken back as a create's sandbox is: a failure to prepare its new catalogue
    // must not answer that nothing was done. A reset sent again prepares one.
    const sandbox = await this.#prepared(canonical, before + 1).catch((cause: unknown) => {
      throw new OutcomeUnknownError('the sandbox was reset, and its new catalogue could not be prepared: reset it again', { cause })
    })
    if (receiver !== null) this.#receivers.deliver(sandbox, JSON.parse(receiver) as StoredReceiver)
    return { sandbox, fixtures: JSON.parse(String(fixtures)) as unknown }
  }

  async delete (id: string): Promise<boolean> {
    const canonical = id.toLowerCase()
    const keys = this.#keys
    // Forgotten with its receiver, its generation left over to be deleted.
    const deleted = await this.#changed(canonical, ({ generation }, receiver) => {
      const change = journalEmptied(new Change(), keys, canonical).write('HDEL', keys.sandboxes, canonical).write('HDEL', keys.sandboxFixtures, canonical)
        .write('ZREM', keys.sandboxUse, canonical).write('HDEL', keys.sandboxCreated, canonical).write('SADD', keys.sandboxLeftovers, `${canonical}:${generation}`)
      if (receiver !== null) change.write('HDEL', keys.sandboxReceivers, canonical).write('INCR', keys.sandboxReceiversVersion)
      return change
    })
    if (deleted === undefined) return false
    const { generation } = deleted.entry
    this.#served.delete(canonical)
    this.#receivers.stop(canonical)
    await this.#tidy(this.#deleteKeys(canonical, generation))
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
    const moved = await this.#changed(canonical, ({ generation, aheadMs }) => {
      const moved = clockAdvanced(aheadMs, ms)
      return moved === 'too far' ? undefined : new Change().write('HSET', this.#keys.sandboxes, canonical, registryEntryText({ generation, aheadMs: moved }))
    })
    if (moved === undefined) return undefined
    // As the change was decided, from the entry it was made on.
    const aheadMs = clockAdvanced(moved.entry.aheadMs, ms)
    if (aheadMs === 'too far') return aheadMs
    const { generation } = moved.entry
    // This instance's catalogue of it, and its receiver's deliveries, on the moved clock at once; another instance's at
    // its next request into it.
    const served = this.#served.get(canonical)
    if (served?.generation === generation) served.clockAheadMs = Math.max(served.clockAheadMs, aheadMs)
    // Nothing does it again, but a 503 would have the move made again when tried again.
    await this.#tidy(eachKeyBatch(this.#connection.redis, generationKeys(this.#keys, canonical, generation).prefix, async (keys) => { await call(this.#connection.redis.expireSooner(ms, ...keys)) }),
      'a sandbox\'s clock moved on, but not the expiries of what it keeps: some expire later than its clock says')
    return { now: this.#connection.clock.now() + aheadMs, aheadMs }
  }

  async events (id: string, after: number, limit: number): Promise<SandboxEvent[] | undefined> {
    const sandbox = await this.#find(id, { used: false })
    if (sandbox === undefined) return undefined
    return await listedAfter(this.#connection.redis, generationKeys(this.#keys, sandbox.id, sandbox.generation).keys.outbox, after, limit)
  }

  async note (id: string, record: JournalRecord): Promise<void> {
    await this.#journals.note(id.toLowerCase(), record)
  }

  async journal (id: string, after: JournalPosition): Promise<KeptEntry[] | undefined> {
    return await this.#journals.after(id.toLowerCase(), after)
  }

  onJournal (listener: (id: string) => void): void {
    this.#journals.onChange(listener)
  }

  /**
   * The receiver is kept in the registry, and its deliveries are made as a new subscriber of the sandbox's outbox
   * each time, so that what an instance still delivering the one before takes is nothing: its cursor and its
   * deliveries are deleted.
   */
  async setReceiver (id: string, receiver: SandboxReceiver | undefined): Promise<boolean> {
    const canonical = id.toLowerCase()
    const stored: StoredReceiver | undefined = receiver === undefined ? undefined : { subscriber: randomUuid(), url: receiver.url, secret: receiver.secret }
    const set = await this.#writes.run(async (deadline, outcomeKey) =>
      await this.#connection.redis.setSandboxReceiver(...this.#registry, deadline, outcomeKey, canonical, stored === undefined ? '' : JSON.stringify(stored),
        ...generationKeyNames(this.#keys, canonical)))
    if (set === null) return false
    const [generation, before] = set
    const sandbox = this.#generationAt(canonical, generation)
    if (stored === undefined) this.#receivers.stop(canonical)
    else this.#receivers.deliver(sandbox, stored)
    if (before !== '') await this.#tidy(sandbox.outbox.unsubscribe((JSON.parse(before) as StoredReceiver).subscriber))
    return true
  }

  /**
   * Reads the sandbox's registry entry and receiver, and commits the change `decide` makes of them only while both are
   * as read (another instance's change in between: read and decided again). Undefined when there is no sandbox; what
   * was read when `decide` makes no change.
   */
  async #changed (id: string, decide: (entry: RegistryEntry, receiver: string | null) => Change | undefined): Promise<{ entry: RegistryEntry, receiver: string | null } | undefined> {
    const { redis } = this.#connection
    const keys = this.#keys
    return await retried(`sandbox ${id}`, async () => {
      const [entry, receiver] = await Promise.all([call(redis.hget(keys.sandboxes, id)), call(redis.hget(keys.sandboxReceivers, id))])
      if (entry === null) return undefined
      const read = { entry: registryEntry(entry), receiver }
      const change = decide(read.entry, receiver)
      if (change === undefined) return read
      change.guard(keys.sandboxes, id, entry).guard(keys.sandboxReceivers, id, receiver)
      return await commit(redis, this.#writes, keys, change) === 1 ? read : STALE
    })
  }

  // What follows a registry change once it is made: this instance's own part, which the receivers' next read or the
  // sweep of left-over generations does again (a replaced receiver's keys excepted: they go with their generation),
  // unless `failed` says otherwise. Its failure is logged; the change is answered as made, which it was.
  async #tidy (step: Promise<void>, failed = 'a sandbox\'s change is made, but not what follows it here; the next read or sweep does it'): Promise<void> {
    try {
      await step
    } catch (err) {
      this.#connection.logger.warn({ err }, failed)
    }
  }

  /** Its catalogues stay in Redis for every instance; this instance's copies and deliveries go with it. */
  async close (): Promise<void> {
    await this.#receivers.close()
    this.#served.clear()
  }

  // The generation's catalogue as this instance keeps it, made when it keeps none.
  #generationAt (id: string, generation: number): Generation {
    const served = this.#served.get(id)
    return served?.generation === generation ? served : this.#generation(id, generation)
  }

  #generation (id: string, generation: number): Generation {
    const { keys } = generationKeys(this.#keys, id, generation)
    const { clock } = this.#connection
    const catalogue = catalogueUnder(this.#connection, keys, {
      writes: this.#writes.ofSandbox(`${this.#keys.sandboxes} ${id} ${generation}`, () => sandbox.clockAheadMs),
      now: () => clock.now() + sandbox.clockAheadMs,
      // Never tracked: nothing kept, every session read from Redis.
      sessions: new TrackedSessions(1),
      cachedUsers: this.#cachedUsers,
      itemTextCharacters: this.#itemTextCharacters,
      maxItemsPerContributor: this.#options.maxItemsPerContributor,
      idempotencyKeys: this.#options.idempotencyKeys,
      accounts: this.settings,
      keysPerRateLimit: KEYS_PER_SANDBOX_RATE_LIMIT,
      outbox: { ...SANDBOX_OUTBOX_BOUNDS, stream: { events: SANDBOX_EVENTS, bytes: SANDBOX_EVENT_BYTES } }
    })
    const sandbox: Generation = { id, generation, clockAheadMs: 0, outbox: catalogue.outbox, store: { ...catalogue, available: this.#available } }
    this.#served.set(id, sandbox)
    return sandbox
  }

  // A generation's catalogue made ready to be seeded, as a start prepares the service's.
  async #prepared (id: string, generation: number): Promise<Generation> {
    await indexItems(this.#connection.redis, generationKeys(this.#keys, id, generation).keys)
    return this.#generation(id, generation)
  }

  // Deletes the keys of a generation left over (sandboxLeftovers), and then forgets it.
  async #deleteKeys (id: string, generation: number): Promise<void> {
    const { redis } = this.#connection
    await eachKeyBatch(redis, generationKeys(this.#keys, id, generation).prefix, async (keys) => { await call(redis.unlink(...keys)) })
    await call(redis.srem(this.#keys.sandboxLeftovers, `${id}:${generation}`))
  }
}
