import { randomUuid } from '../runtime/uuid.js'
import { createMemoryStore, type MemoryStore, type MemoryStoreOptions } from './memory/index.js'
import type { CapacityBounds } from './capacity.js'
import type { OutboxEvent } from './store.js'

/** An event of a sandbox, as its outbox recorded it, and its place in the sandbox's order (from 1). */
export interface SandboxEvent {
  readonly sequence: number
  readonly event: OutboxEvent
}

// What a sandbox keeps of its events at most, the newest: so many, and so many characters of their text.
export const SANDBOX_EVENTS = 1000
export const SANDBOX_EVENT_CHARACTERS = 512 * 1024

/** The events of one sandbox in the order they were recorded, the newest SANDBOX_EVENTS (and characters) of them. */
export class SandboxEvents {
  readonly #kept: SandboxEvent[] = []
  #characters = 0
  #lastSequence = 0

  record (event: OutboxEvent): void {
    this.#lastSequence += 1
    this.#kept.push({ sequence: this.#lastSequence, event })
    this.#characters += event.body.length
    while (this.#kept.length > SANDBOX_EVENTS || this.#characters > SANDBOX_EVENT_CHARACTERS) this.#characters -= this.#kept.shift()!.event.body.length
  }

  /** Up to `limit` events recorded after `sequence`, oldest first. */
  after (sequence: number, limit: number): SandboxEvent[] {
    const first = this.#kept.findIndex((kept) => kept.sequence > sequence)
    return first === -1 ? [] : this.#kept.slice(first, first + limit)
  }
}

// How far a sandbox's clock may run ahead of the service's: its timestamps keep four-digit years.
export const SANDBOX_CLOCK_AHEAD_YEARS = 100
const SANDBOX_CLOCK_AHEAD_MS = SANDBOX_CLOCK_AHEAD_YEARS * 365.25 * 24 * 3600 * 1000

/**
 * A sandbox's clock: the service's, moved on by what the sandbox's calls have advanced it. It only goes forward, so
 * that nothing the sandbox timed (a token, a session, a key, a count) comes back to life.
 */
export class SandboxClock {
  #aheadMs = 0

  readonly now = (): number => Date.now() + this.#aheadMs

  get aheadMs (): number {
    return this.#aheadMs
  }

  /** Moves the clock on by `ms`; false, and no move, past SANDBOX_CLOCK_AHEAD_YEARS ahead of the service's. */
  advance (ms: number): boolean {
    if (this.#aheadMs + ms > SANDBOX_CLOCK_AHEAD_MS) return false
    this.#aheadMs += ms
    return true
  }
}

/** Where a sandbox's events are delivered, as the service's webhooks are: the test's own receiver. */
export interface SandboxReceiver {
  readonly url: string
  /** Standard Webhooks' `whsec_<base64>`; never logged. */
  readonly secret: string
}

/** Told when a sandbox is given a receiver (a reset's sandbox keeps its own), and when what it delivered ends. */
export interface SandboxWatcher {
  receiverSet: (sandbox: Sandbox, receiver: SandboxReceiver) => void
  /** The sandbox was deleted, or replaced by a reset, or its receiver removed. */
  receiverEnded: (sandbox: Sandbox) => void
}

// What a sandbox's outbox keeps for its receiver: as many pending deliveries and dead letters as it keeps events to
// read back, within as many characters and bytes of them.
const SANDBOX_OUTBOX_BOUNDS = { deliveries: SANDBOX_EVENTS, characters: SANDBOX_EVENT_CHARACTERS, deadLetters: SANDBOX_EVENTS, deadLetterBytes: SANDBOX_EVENT_CHARACTERS }

/** An isolated catalogue: its own users, sessions, items, idempotency keys, rate-limit counts, events and clock. */
export interface Sandbox {
  readonly id: string
  readonly store: MemoryStore
  /** What the store reads the time from: everything the sandbox times follows it. */
  readonly clock: SandboxClock
  /** Every change's event, kept to be read back, whether or not its receiver is delivered it. */
  readonly events: SandboxEvents
  /** The users and items it was created with (a SEED_FILE's shape), which a reset puts back. */
  readonly fixtures: unknown
  /** Where its events are delivered, when a test named a receiver; a reset keeps it. */
  receiver: SandboxReceiver | undefined
  /** When a request last used it (ms since the epoch); it is deleted once idle past SandboxesConfig.idleMs. */
  usedAt: number
}

// Client keys each rate limit of a sandbox keeps (under its limit, and as many again over it): a rig's few
// addresses and emails, and a bound on what a sandbox's counters hold however many it is sent.
const KEYS_PER_SANDBOX_RATE_LIMIT = 256

export interface SandboxBounds {
  /** Sandboxes that may exist at once. */
  readonly limit: number
  /** How long a sandbox no request uses lives on. */
  readonly idleMs: number
  /** What each sandbox's store keeps at most for its accounts. */
  readonly capacityBytes: number
}

/** What each sandbox's store is made with: the service's own settings, but for the budget. */
export interface SandboxStoreOptions {
  readonly maxItemsPerContributor: number
  readonly idempotencyKeys: MemoryStoreOptions['idempotencyKeys']
  /** The service's floors and ceilings; the budget is SandboxBounds.capacityBytes. */
  readonly capacity: Omit<CapacityBounds, 'budgetBytes'>
}

/**
 * The sandboxes of one process, each with a memory store of its own, bounded in number (`limit`), in what each
 * keeps (`capacityBytes`, as the service's budget bounds its accounts) and in how long each lives unused (`idleMs`).
 */
export class Sandboxes {
  readonly #config: SandboxBounds
  readonly #store: SandboxStoreOptions
  readonly #byId = new Map<string, Sandbox>()
  readonly #watchers: SandboxWatcher[] = []

  /** `store`: what the service's own store is made with; each sandbox's is made alike, within its own bounds. */
  constructor (config: SandboxBounds, store: SandboxStoreOptions) {
    this.#config = config
    this.#store = store
  }

  watch (watcher: SandboxWatcher): void {
    this.#watchers.push(watcher)
  }

  get settings (): SandboxBounds {
    return this.#config
  }

  get size (): number {
    return this.#byId.size
  }

  /**
   * Makes an empty sandbox, to be seeded with `fixtures` (its caller's part); undefined when as many as the limit
   * exist.
   */
  create (now: number, fixtures: unknown): Sandbox | undefined {
    if (this.#byId.size >= this.#config.limit) return undefined
    const sandbox = this.#made(randomUuid(), fixtures, now)
    this.#byId.set(sandbox.id, sandbox)
    return sandbox
  }

  /**
   * Replaces the sandbox with an empty one of the same id and fixtures, its clock the service's again, to be seeded
   * again; undefined when none.
   */
  reset (id: string, now: number): Sandbox | undefined {
    const sandbox = this.get(id)
    if (sandbox === undefined) return undefined
    const emptied = this.#made(sandbox.id, sandbox.fixtures, now)
    emptied.receiver = sandbox.receiver
    this.#byId.set(sandbox.id, emptied)
    this.#gone(sandbox)
    const { receiver } = emptied
    if (receiver !== undefined) for (const watcher of this.#watchers) watcher.receiverSet(emptied, receiver)
    return emptied
  }

  /** Delivers the sandbox's events from now on to `receiver`, in place of any it had; false when there is no sandbox. */
  setReceiver (id: string, receiver: SandboxReceiver | undefined): boolean {
    const sandbox = this.get(id)
    if (sandbox === undefined) return false
    sandbox.receiver = receiver
    for (const watcher of this.#watchers) {
      if (receiver === undefined) watcher.receiverEnded(sandbox)
      else watcher.receiverSet(sandbox, receiver)
    }
    return true
  }

  #made (id: string, fixtures: unknown, now: number): Sandbox {
    const clock = new SandboxClock()
    const store = createMemoryStore({
      ...this.#store,
      clock: clock.now,
      keysPerRateLimit: KEYS_PER_SANDBOX_RATE_LIMIT,
      pendingDeliveries: SANDBOX_OUTBOX_BOUNDS,
      // A rig registers as fast as it asks: no pace, within the sandbox's own floors.
      capacity: { ...this.#store.capacity, budgetBytes: this.#config.capacityBytes, registrationRoomMs: 0 }
    })
    const events = new SandboxEvents()
    store.outbox.onRecorded((event) => { events.record(event) })
    return { id, store, clock, events, fixtures, receiver: undefined, usedAt: now }
  }

  get (id: string): Sandbox | undefined {
    return this.#byId.get(id.toLowerCase())
  }

  /**
   * Deletes the sandbox with everything it keeps; false when there was none. A memory store holds nothing to
   * release but its data, which goes with it; the watchers end its receiver's deliveries.
   */
  delete (id: string): boolean {
    const sandbox = this.get(id)
    if (sandbox === undefined) return false
    this.#byId.delete(sandbox.id)
    this.#gone(sandbox)
    return true
  }

  /** Deletes the sandboxes no request has used for `idleMs` before `now`: their ids. */
  deleteIdle (now: number): string[] {
    const idle = [...this.#byId.values()].filter((sandbox) => now - sandbox.usedAt >= this.#config.idleMs).map((sandbox) => sandbox.id)
    for (const id of idle) this.delete(id)
    return idle
  }

  deleteAll (): void {
    for (const id of [...this.#byId.keys()]) this.delete(id)
  }

  #gone (sandbox: Sandbox): void {
    for (const watcher of this.#watchers) watcher.receiverEnded(sandbox)
  }
}
