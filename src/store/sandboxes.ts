import type { IdempotencyKeyBounds } from '../domain/bounds.js'
import type { JournalPosition, JournalRecord, KeptEntry } from '../domain/journal.js'
import type { Outbox, OutboxBounds } from './outbox.js'
import type { ServingStore, Store } from './store.js'

/** An event of a sandbox, as its change recorded it (the body its webhooks carry), and its place in the sandbox's order (from 1). */
export interface SandboxEvent {
  readonly sequence: number
  readonly body: string
}

// What a sandbox keeps of its events at most, the newest: so many, and so many bytes of their bodies (UTF-8).
export const SANDBOX_EVENTS = 1000
export const SANDBOX_EVENT_BYTES = 512 * 1024

// What a sandbox's outbox keeps for its receiver: as many pending deliveries and dead letters as it keeps events to
// read back, within as many bytes of them.
export const SANDBOX_OUTBOX_BOUNDS: OutboxBounds = { deliveries: SANDBOX_EVENTS, deliveryBytes: SANDBOX_EVENT_BYTES, deadLetters: SANDBOX_EVENTS, deadLetterBytes: SANDBOX_EVENT_BYTES }

/** Where a sandbox's events are delivered, as the service's webhooks are: the test's own receiver. */
export interface SandboxReceiver {
  readonly url: string
  /** Standard Webhooks' `whsec_<base64>`; never logged. */
  readonly secret: string
}

/** A sandbox's receiver, as its deliveries are made: to `subscriber` of `outbox`, the outbox of the sandbox as it is now. */
export interface ReceiverDeliveries {
  readonly sandboxId: string
  readonly subscriber: string
  readonly receiver: SandboxReceiver
  readonly outbox: Outbox
  /** The sandbox's clock, which its deliveries fall due by: a move of it brings their retries forward. */
  readonly now: () => number
}

/**
 * Told when a sandbox's receiver starts (set, or set again on a reset's catalogue, or found set by another
 * instance), and when it ends (removed, replaced, or its sandbox deleted): it makes the deliveries.
 */
export interface SandboxWatcher {
  /** Delivers from now on as `deliveries` says, in place of whatever the sandbox's receiver was before. */
  receiverSet: (deliveries: ReceiverDeliveries) => void
  receiverEnded: (sandboxId: string) => void
  /** Every delivery ended: resolves once what they hold is released. */
  close: () => Promise<void>
}

/** A sandbox as a request meets it: its id (a UUID in lower case) and the store that serves it. */
export interface Sandbox {
  readonly id: string
  readonly store: ServingStore
}

/** A sandbox as the operations API lists it. */
export interface SandboxSummary {
  /** Its id, in lower case. */
  readonly id: string
  /** When it was made (ms since the epoch); undefined where the store did not note it. */
  readonly createdAt: number | undefined
  /** When a request last used it (ms since the epoch). */
  readonly usedAt: number
  /** The bytes of their quotas its accounts use. */
  readonly heldBytes: number
}

/** A page of sandboxes, by id: `next` is the last one's id when more follow. */
export interface SandboxPage {
  readonly sandboxes: readonly SandboxSummary[]
  readonly next: string | undefined
}

/** A sandbox's clock as a move left it: its time (ms since the epoch) and how far it runs ahead of the service's. */
export interface SandboxClockReading {
  readonly now: number
  readonly aheadMs: number
}

// Client keys each rate limit of a sandbox keeps (under its limit, and as many again over it): a rig's few
// addresses and emails, and a bound on what a sandbox's counters hold however many it is sent.
export const KEYS_PER_SANDBOX_RATE_LIMIT = 256

export interface SandboxBounds {
  /** Sandboxes that may exist at once. */
  readonly limit: number
  /** How long a sandbox no request uses lives on. */
  readonly idleMs: number
  /** Accounts each sandbox admits (its own MAX_ACCOUNTS). */
  readonly accounts: number
  /** Each account's quota, the service's (ACCOUNT_QUOTA_KIB). */
  readonly quotaBytes: number
}

/** What a sandbox's accounts keep at most of their quotas, all together. */
export const sandboxCapacityBytes = ({ accounts, quotaBytes }: SandboxBounds): number => accounts * quotaBytes

/** What each sandbox's store is made with: the service's own settings, but for the accounts it admits. */
export interface SandboxStoreOptions {
  readonly maxItemsPerContributor: number
  readonly idempotencyKeys: Partial<IdempotencyKeyBounds> | undefined
}

/**
 * The sandboxes of a service: isolated catalogues, each with its own users, sessions, items, idempotency keys,
 * rate-limit counts, events and clock, bounded in number (`limit`), in what each keeps (`accounts`, each within the
 * service's quota) and in how long each lives unused (`idleMs`). A sandbox's id is looked up
 * in any case; every answer names it in lower case.
 */
export interface Sandboxes {
  readonly settings: SandboxBounds
  /** How many exist now. */
  count: () => Promise<number>
  /** Up to `limit` sandboxes, by id, those whose id sorts after `after` when it is given; none is noted as used. */
  list: (after: string | undefined, limit: number) => Promise<SandboxPage>
  /** Makes an empty sandbox, to be seeded with `fixtures` (its caller's part); undefined when as many as the limit exist. */
  create: (fixtures: unknown) => Promise<Sandbox | undefined>
  /** The sandbox, noted as used now (its idle lifetime starts again); undefined when none. */
  use: (id: string) => Promise<Sandbox | undefined>
  /**
   * Empties the sandbox, its clock the service's again, to be seeded again with the fixtures it was created with
   * (returned); undefined when none. Its receiver is kept.
   */
  reset: (id: string) => Promise<{ sandbox: Sandbox, fixtures: unknown } | undefined>
  /** Deletes the sandbox with everything it keeps, and ends its receiver's deliveries; false when there was none. */
  delete: (id: string) => Promise<boolean>
  /**
   * Deletes a sandbox whose making failed before its caller learnt its id, so that it takes no place under the
   * limit: now, or, while the store is out of reach, before this instance's next create. Never fails.
   */
  abandon: (id: string) => Promise<void>
  /** Deletes the sandboxes no request has used for `idleMs`: their ids. */
  deleteIdle: () => Promise<string[]>
  /** Moves the sandbox's clock on by `ms`: 'too far' (and no move) past SANDBOX_CLOCK_AHEAD_YEARS ahead; undefined when none. */
  advanceClock: (id: string, ms: number) => Promise<SandboxClockReading | 'too far' | undefined>
  /** Up to `limit` of the sandbox's events recorded after `sequence`, oldest first; undefined when none. */
  events: (id: string, after: number, limit: number) => Promise<SandboxEvent[] | undefined>
  /** Adds the record to the sandbox's journal, its oldest entry out past SANDBOX_JOURNAL_ENTRIES; nothing when there is no sandbox. */
  note: (id: string, record: JournalRecord) => Promise<void>
  /** The sandbox's journal after `after`, oldest first; undefined when there is no sandbox. */
  journal: (id: string, after: JournalPosition) => Promise<KeptEntry[] | undefined>
  /**
   * Tells `listener` of each sandbox whose journal may have changed (an entry added, the journal emptied or deleted),
   * on whichever instance it changed, as it changes; of every sandbox at once (the empty id) when this instance may
   * have missed some.
   */
  onJournal: (listener: (id: string) => void) => void
  /** Delivers the sandbox's events from now on to `receiver`, in place of any it had (none: undefined); false when there is no sandbox. */
  setReceiver: (id: string, receiver: SandboxReceiver | undefined) => Promise<boolean>
  /** Ends what the sandboxes hold in this process (the memory store's sandboxes, deliveries in progress). */
  close: () => Promise<void>
}

/**
 * A store that keeps sandboxes beside its own catalogue, for every instance that shares it (Redis: under key prefixes
 * of their own); a store without `sandboxes` has them kept in the process instead (memory).
 */
export interface KeepsSandboxes {
  readonly sandboxes?: (bounds: SandboxBounds, options: SandboxStoreOptions, watcher: SandboxWatcher) => Sandboxes
}

/** The service's store, as the app holds it. */
export type AppStore = Store & KeepsSandboxes
