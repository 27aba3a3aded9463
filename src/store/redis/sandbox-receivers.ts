import { setTimeout as sleep } from 'node:timers/promises'
import type { SandboxWatcher } from '../sandboxes.js'
import { call } from './commands.js'
import type { RedisKeys } from './keys.js'
import type { RedisOutbox } from './outbox.js'
import { registryEntry, type StoredReceiver } from './sandbox-registry.js'
import type { RedisConnection } from './store.js'

// How often an instance reads whether the sandboxes' receivers changed, to deliver each sandbox's events as well:
// how soon another instance's receiver is delivered by this one too (the one that set it does at once).
const RECEIVERS_READ_EVERY_MS = 1000

/** A generation of a sandbox whose events a receiver is delivered: its outbox as this instance keeps it. */
export interface DeliveredGeneration {
  readonly id: string
  readonly generation: number
  readonly outbox: RedisOutbox
  /** Its clock, as this instance last read it. */
  readonly store: { readonly now: () => number }
}

/**
 * The sandboxes' receivers this instance delivers (through the watcher): those its own changes set, and, read from
 * the registry every RECEIVERS_READ_EVERY_MS while it changes, those other instances set, so that every instance
 * delivers each sandbox's events (each delivery leased to one).
 */
export class DeliveredReceivers {
  readonly #connection: RedisConnection
  readonly #keys: RedisKeys
  readonly #watcher: SandboxWatcher
  readonly #generationAt: (id: string, generation: number) => DeliveredGeneration
  // Sandbox id → "<generation> <subscriber>"; and the version of the registry's receivers they were read at.
  readonly #delivering = new Map<string, string>()
  #version = ''
  #unread = false
  readonly #closed = new AbortController()
  readonly #reading: Promise<void>

  constructor (connection: RedisConnection, keys: RedisKeys, watcher: SandboxWatcher, generationAt: (id: string, generation: number) => DeliveredGeneration) {
    this.#connection = connection
    this.#keys = keys
    this.#watcher = watcher
    this.#generationAt = generationAt
    // Ends only by the abort of its wait, at close.
    this.#reading = this.#readUntilClosed().catch(() => {})
  }

  // Delivers the sandbox's events to `receiver` from this instance too, from the cursor its set or reset placed. A
  // registry read before it moved on names a receiver without one, whose deliveries take nothing until the next read
  // replaces them.
  deliver (sandbox: DeliveredGeneration, receiver: StoredReceiver): void {
    this.#delivering.set(sandbox.id, `${sandbox.generation} ${receiver.subscriber}`)
    this.#watcher.receiverSet({ sandboxId: sandbox.id, subscriber: receiver.subscriber, receiver: { url: receiver.url, secret: receiver.secret }, outbox: sandbox.outbox, now: sandbox.store.now })
  }

  stop (id: string): void {
    if (this.#delivering.delete(id)) this.#watcher.receiverEnded(id)
  }

  /** Stops reading, and ends every delivery this instance makes. */
  async close (): Promise<void> {
    this.#closed.abort()
    await this.#reading
    for (const id of [...this.#delivering.keys()]) this.stop(id)
    await this.#watcher.close()
  }

  // Reads the receivers every RECEIVERS_READ_EVERY_MS, one read at a time, until closed.
  async #readUntilClosed (): Promise<void> {
    for (;;) {
      await sleep(RECEIVERS_READ_EVERY_MS, undefined, { signal: this.#closed.signal, ref: false })
      await this.#follow().then(() => { this.#unread = false }, (err: unknown) => {
        // Once a failing streak: Redis's outage is logged by the connection too.
        if (!this.#unread) this.#connection.logger.warn({ err }, 'cannot read the sandboxes\' receivers; trying again every second')
        this.#unread = true
      })
    }
  }

  // Delivers what the registry says each sandbox's receiver is now, when it changed since the last read. What
  // changes after the version is read is read too, and read again at the next, whose version it changed.
  async #follow (): Promise<void> {
    const { redis } = this.#connection
    const keys = this.#keys
    const version = await call(redis.get(keys.sandboxReceiversVersion)) ?? '0'
    if (version === this.#version) return
    const receivers = Object.entries(await call(redis.hgetall(keys.sandboxReceivers)))
    const entries = receivers.length === 0 ? [] : await call(redis.hmget(keys.sandboxes, ...receivers.map(([id]) => id)))
    const now = new Map<string, StoredReceiver & { generation: number }>()
    receivers.forEach(([id, receiver], index) => {
      // A sandbox deleted since has none.
      const entry = entries[index]
      if (typeof entry === 'string') now.set(id, { ...JSON.parse(receiver) as StoredReceiver, generation: registryEntry(entry).generation })
    })
    for (const id of [...this.#delivering.keys()]) if (!now.has(id)) this.stop(id)
    for (const [id, { generation, ...receiver }] of now) {
      if (this.#delivering.get(id) === `${generation} ${receiver.subscriber}`) continue
      this.deliver(this.#generationAt(id, generation), receiver)
    }
    this.#version = version
  }
}
