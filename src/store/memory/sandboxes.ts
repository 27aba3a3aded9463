import type { JournalPosition, JournalRecord, KeptEntry } from '../../domain/journal.js'
import { clockAdvanced, pageById } from '../../domain/sandboxes.js'
import { randomUuid } from '../../runtime/uuid.js'
import { createMemoryStore, type MemoryStore } from './index.js'
import { MemoryJournal } from './journal.js'
import {
  KEYS_PER_SANDBOX_RATE_LIMIT, type Sandbox, SANDBOX_EVENT_BYTES, SANDBOX_EVENTS, SANDBOX_OUTBOX_BOUNDS, type SandboxBounds,
  type SandboxClockReading, type SandboxEvent, type SandboxPage, type SandboxReceiver, type Sandboxes, type SandboxStoreOptions, type SandboxWatcher
} from '../sandboxes.js'

/** The events of one sandbox in the order they were recorded, the newest SANDBOX_EVENTS (and SANDBOX_EVENT_BYTES) of them. */
class SandboxEvents {
  readonly #kept: Array<SandboxEvent & { readonly bytes: number }> = []
  #bytes = 0
  #lastSequence = 0

  record (body: string): void {
    this.#lastSequence += 1
    const bytes = Buffer.byteLength(body)
    this.#kept.push({ sequence: this.#lastSequence, body, bytes })
    this.#bytes += bytes
    while (this.#kept.length > SANDBOX_EVENTS || this.#bytes > SANDBOX_EVENT_BYTES) this.#bytes -= this.#kept.shift()!.bytes
  }

  after (sequence: number, limit: number): SandboxEvent[] {
    const first = this.#kept.findIndex((kept) => kept.sequence > sequence)
    return first === -1 ? [] : this.#kept.slice(first, first + limit)
  }
}

/**
 * A sandbox's clock: the service's, moved on by what the sandbox's calls have advanced it. It only goes forward, so
 * that nothing the sandbox timed (a token, a session, a key, a count) comes back to life.
 */
class SandboxClock {
  #aheadMs = 0

  readonly now = (): number => Date.now() + this.#aheadMs

  advance (ms: number): SandboxClockReading | 'too far' {
    const aheadMs = clockAdvanced(this.#aheadMs, ms)
    if (aheadMs === 'too far') return aheadMs
    this.#aheadMs = aheadMs
    return { now: this.now(), aheadMs: this.#aheadMs }
  }
}

// A sandbox's outbox has this one subscriber while it has a receiver.
const RECEIVER = 'sandbox-receiver'

interface Kept extends Sandbox {
  readonly store: MemoryStore
  readonly clock: SandboxClock
  readonly events: SandboxEvents
  /** A reset empties it, and keeps it. */
  readonly journal: MemoryJournal
  readonly fixtures: unknown
  /** When it was made (ms since the epoch); a reset keeps it. */
  readonly createdAt: number
  receiver: SandboxReceiver | undefined
  /** When a request last used it (ms since the epoch). */
  usedAt: number
}

/** The sandboxes of one process, each a memory store of its own: they go with the process. */
export class MemorySandboxes implements Sandboxes {
  readonly settings: SandboxBounds
  readonly #store: SandboxStoreOptions
  readonly #watcher: SandboxWatcher | undefined
  readonly #byId = new Map<string, Kept>()
  readonly #journalListeners: Array<(id: string) => void> = []

  /** `store`: what the service's own store is made with; each sandbox's is made alike, within its own bounds. */
  constructor (bounds: SandboxBounds, store: SandboxStoreOptions, watcher?: SandboxWatcher) {
    this.settings = bounds
    this.#store = store
    this.#watcher = watcher
  }

  async count (): Promise<number> {
    return this.#byId.size
  }

  async list (after: string | undefined, limit: number): Promise<SandboxPage> {
    const { listed, next } = pageById(this.#byId.keys(), after, limit)
    const sandboxes = await Promise.all(listed.map((id) => this.#byId.get(id)!).map(async ({ id, createdAt, usedAt, store }) =>
      ({ id, createdAt, usedAt, heldBytes: (await store.usage()).heldBytes })))
    return { sandboxes, next }
  }

  async create (fixtures: unknown): Promise<Sandbox | undefined> {
    if (this.#byId.size >= this.settings.limit) return undefined
    const sandbox = this.#made(randomUuid(), fixtures, Date.now(), new MemoryJournal())
    this.#byId.set(sandbox.id, sandbox)
    return sandbox
  }

  async use (id: string): Promise<Sandbox | undefined> {
    const sandbox = this.#get(id)
    if (sandbox !== undefined) sandbox.usedAt = Date.now()
    return sandbox
  }

  async reset (id: string): Promise<{ sandbox: Sandbox, fixtures: unknown } | undefined> {
    const sandbox = this.#get(id)
    if (sandbox === undefined) return undefined
    const emptied = this.#made(sandbox.id, sandbox.fixtures, sandbox.createdAt, sandbox.journal)
    this.#byId.set(sandbox.id, emptied)
    this.#deliver(emptied, sandbox.receiver)
    sandbox.journal.empty()
    this.#journalChanged(sandbox.id)
    return { sandbox: emptied, fixtures: emptied.fixtures }
  }

  async setReceiver (id: string, receiver: SandboxReceiver | undefined): Promise<boolean> {
    const sandbox = this.#get(id)
    if (sandbox === undefined) return false
    sandbox.store.outbox.unsubscribe(RECEIVER)
    this.#deliver(sandbox, receiver)
    return true
  }

  // The sandbox's events delivered to `receiver` from now on (none: undefined), in place of any before.
  #deliver (sandbox: Kept, receiver: SandboxReceiver | undefined): void {
    sandbox.receiver = receiver
    if (receiver === undefined) this.#watcher?.receiverEnded(sandbox.id)
    else this.#watcher?.receiverSet({ sandboxId: sandbox.id, subscriber: RECEIVER, receiver, outbox: sandbox.store.outbox, now: sandbox.clock.now })
  }

  async advanceClock (id: string, ms: number): Promise<SandboxClockReading | 'too far' | undefined> {
    return this.#get(id)?.clock.advance(ms)
  }

  async events (id: string, after: number, limit: number): Promise<SandboxEvent[] | undefined> {
    return this.#get(id)?.events.after(after, limit)
  }

  async note (id: string, record: JournalRecord): Promise<void> {
    this.#get(id)?.journal.add(record)
    this.#journalChanged(id.toLowerCase())
  }

  async journal (id: string, after: JournalPosition): Promise<KeptEntry[] | undefined> {
    return this.#get(id)?.journal.after(after)
  }

  onJournal (listener: (id: string) => void): void {
    this.#journalListeners.push(listener)
  }

  #journalChanged (id: string): void {
    for (const listener of this.#journalListeners) listener(id)
  }

  /** A memory store holds nothing to release but its data, which goes with it; the watcher ends its receiver's deliveries. */
  async delete (id: string): Promise<boolean> {
    const sandbox = this.#get(id)
    if (sandbox === undefined) return false
    this.#byId.delete(sandbox.id)
    this.#watcher?.receiverEnded(sandbox.id)
    this.#journalChanged(sandbox.id)
    return true
  }

  async abandon (id: string): Promise<void> {
    await this.delete(id)
  }

  async deleteIdle (): Promise<string[]> {
    const now = Date.now()
    const idle = [...this.#byId.values()].filter((sandbox) => now - sandbox.usedAt >= this.settings.idleMs).map((sandbox) => sandbox.id)
    for (const id of idle) await this.delete(id)
    return idle
  }

  async close (): Promise<void> {
    for (const id of [...this.#byId.keys()]) await this.delete(id)
    await this.#watcher?.close()
  }

  #get (id: string): Kept | undefined {
    return this.#byId.get(id.toLowerCase())
  }

  #made (id: string, fixtures: unknown, createdAt: number, journal: MemoryJournal): Kept {
    const clock = new SandboxClock()
    const store = createMemoryStore({
      ...this.#store,
      clock: clock.now,
      keysPerRateLimit: KEYS_PER_SANDBOX_RATE_LIMIT,
      pendingDeliveries: SANDBOX_OUTBOX_BOUNDS,
      accounts: this.settings
    })
    const events = new SandboxEvents()
    store.outbox.onRecorded((event) => { events.record(event.body) })
    return { id, store, clock, events, journal, fixtures, createdAt, receiver: undefined, usedAt: Date.now() }
  }
}
