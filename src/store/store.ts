import type { Item, ItemStatus, Session, User } from '../domain/index.js'
import type { ItemText, StoredItem } from '../domain/serialized.js'
import type { Outbox, OutboxEvent } from './outbox.js'

export type { ItemText, StoredItem } from '../domain/serialized.js'
export * from './errors.js'
export type { DeadLetter, DeadLetterList, DeadLetterPage, Delivery, Outbox, OutboxEvent, Taken } from './outbox.js'
export type RefreshOutcome =
  | { readonly status: 'rotated', readonly session: Session }
  /** The token was replaced before and is presented again out of the leeway: its session has been revoked. */
  | { readonly status: 'reused' }
  | { readonly status: 'unknown' }

export interface UserStore {
  /**
   * Adds the user, unless one with the same emailKey exists (then undefined); rejects with an IdTakenError when
   * another has its id, and with a StoreFullError when the store holds as many accounts as it admits. Atomic.
   */
  add (user: User): Promise<User | undefined>
  get (id: string): Promise<User | undefined>
  /** The user, when this process has it at hand (no round trip); undefined means only: ask `get`. See `Store`. */
  cached (id: string): User | undefined
  findByEmailKey (emailKey: string): Promise<User | undefined>
}

/**
 * Sessions and their refresh tokens, by the SHA-256 of each token (a token itself is never stored). Each store
 * bounds what one session remembers, and says how.
 */
export interface SessionStore {
  /**
   * Opens a session with its first refresh token; past `maxPerUser` live sessions, the user's oldest ends. Rejects
   * with a UserRemovedError, opening nothing, when the session's user has no account (removed): checked in the same
   * atomic step, so that no session outlives its account's removal.
   */
  open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void>
  /** The session, while it is neither revoked nor past its end. */
  get (id: string, now: number): Promise<Session | undefined>
  /**
   * The session, when this process can tell without a round trip that `get` would return it; undefined means only:
   * ask `get`. See `Store`.
   */
  cached (id: string, now: number): Session | undefined
  /**
   * Atomically exchanges the refresh token `presentedHash` for `nextHash`. A token is accepted when it is current,
   * or when the session's last rotation replaced it less than `reuseLeewayMs` ago (a retry after a lost response,
   * a second tab): then `nextHash` joins the current tokens, so every pair issued in that window keeps working.
   * Any other token the session had is a replay, and revokes the session. `now` is by the store's clock (`Store.now`),
   * so that instances whose clocks disagree still agree on the leeway.
   */
  rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome>
  revoke (id: string): Promise<void>
  /** Forgets up to `limit` sessions that ended before `now`, oldest first; how many it forgot. */
  sweep (now: number, limit: number): Promise<number>
}

/** Which items a page is cut from: all of them, or those of one status, one contributor, or both. */
export interface ItemFilter {
  readonly status?: ItemStatus
  readonly contributorId?: string
}

export interface ItemPage {
  readonly items: ItemText[]
  readonly total: number
}

/**
 * Builds the event of a change from the item the change leaves (for a removal, the item as it was). It may run
 * more than once for one change (see `update`), so it must be pure; only the event of the stored change is kept.
 * A write given none records no event (nothing would receive it).
 */
export type Announcement = (item: Item) => OutboxEvent

/**
 * A create under a client's Idempotency-Key: recorded with the item it makes by the same atomic step, so that no key
 * ever names an item that was not made, nor is an item made twice under one key.
 */
export interface IdempotencyKey {
  /** Whose key it is: each caller's keys are their own. */
  readonly userId: string
  readonly key: string
  /** A digest of the request: tells a retry from another request sent with the same key. */
  readonly fingerprint: string
}

/**
 * Idempotency keys: each create made under one is remembered with its item for the store's time to live, at most
 * the store's number of keys per user (the oldest out first).
 */
export interface IdempotencyKeyStore {
  /**
   * Forgets records past their time to live, at most `limit`, the oldest first, giving their bytes back to their
   * accounts' quotas: how many. Run every few seconds, so that an expired record's room is free again within them.
   */
  sweep (now: number, limit: number): Promise<number>
}

/** An account as the operations API lists it. */
export interface AccountSummary {
  readonly user: User
  /** The bytes of its quota it uses (src/domain/quotas.ts). */
  readonly heldBytes: number
  /** Items it owns. */
  readonly items: number
}

export interface AccountPage {
  /** The newest first. */
  readonly accounts: readonly AccountSummary[]
  /** Where the next page begins (`before`), when older accounts follow. */
  readonly next: number | undefined
}

/** Accounts as an operator sees them: listed, and removed with what they keep. */
export interface AccountStore {
  /**
   * Accounts, newest first, at most `limit`: those registered before `before` (a page's `next`) when it is given,
   * and only the account of `emailKey` (User.emailKey) when that is.
   */
  list (before: number | undefined, limit: number, emailKey?: string): Promise<AccountPage>
  /**
   * Removes the account's user, its sessions and its idempotency keys, at once, and with them its place among the
   * accounts: false when it has no user (removed already). Its items stay for the caller to remove, each with its
   * event; their bytes stay counted against the account's quota until then.
   */
  remove (userId: string): Promise<boolean>
}

export interface ItemStore {
  /**
   * Adds the item and records its event, unless its contributor already owns as many as the store allows each
   * one (then undefined, and no event); rejects with an IdTakenError when another item has its id, with a
   * UserRemovedError when its contributor has no account (removed), and with a QuotaExceededError when the item
   * (and its record) would take the contributor past their quota even once their own older records are forgotten
   * (src/domain/quotas.ts). With an Idempotency-Key, records the item under it too, forgetting the user's oldest key
   * past the most they keep; when the user recorded a create under that key already, adds nothing and answers that
   * create's item (a replay, told by its id), or, for another request, rejects with a KeyReusedError. With a limit,
   * counts against it once nothing but the quota stands in the item's way (never a replay), and adds nothing over it.
   * Atomic.
   */
  add (item: Item, announce?: Announcement, key?: IdempotencyKey, limit?: WriteLimit): Promise<StoredItem | undefined>
  /** The item as a read sends it: its text (a store may keep no parsed item at hand). */
  get (id: string): Promise<ItemText | undefined>
  /** The items `filter` keeps (all by default) in creation order, oldest first; `total` counts those it keeps. */
  page (offset: number, limit: number, filter?: ItemFilter): Promise<ItemPage>
  /** How many items the catalogue holds. */
  count (): Promise<number>
  /**
   * Atomically replaces the item with `change(current)` and records its event; undefined when there is no such
   * item. When `change` throws, the item stays as it was, no event is recorded and the error reaches the caller;
   * when the item's contributor has no account (removed, its items going with it), it rejects with a
   * UserRemovedError, changing nothing, and with a QuotaExceededError past the contributor's quota (as `add`). With
   * a limit, counts against it once `change` has returned, and changes nothing over it.
   */
  update (id: string, change: (current: StoredItem) => Item, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined>
  /**
   * Atomically removes the item once `confirm(current)` returns, records its event, and returns it as it was;
   * undefined when there is no such item. When `confirm` throws, nothing is removed and the error reaches the caller.
   * With a limit, counts against it once `confirm` has returned, and removes nothing over it.
   */
  remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined>
}

/**
 * A rate limit counted in the same atomic step as the write it limits (the write costs no step of its own): its
 * hit is counted in the limit's counter (`Store.rateCounter(name)`) under `key`, in fixed windows of `windowMs`. A
 * write that makes it more than `max` is not done: the store rejects with what `refusal` answers.
 */
export interface WriteLimit {
  readonly name: string
  readonly key: string
  readonly max: number
  readonly windowMs: number
  /** Told what the limit counted, whether the write goes on or is refused. */
  readonly counted: (counted: Counted) => void
  readonly refusal: (counted: Counted) => Error
}

export interface Counted {
  /** Hits counted in the key's window so far, this one included. */
  readonly current: number
  /** Milliseconds until the window ends. */
  readonly ttl: number
}

/**
 * Counts hits per key in fixed windows of `windowMs`, for one rate limit (`max` hits a window), and calls back with
 * the count, or with the error that kept it from counting (a StoreUnavailableError when the store is unreachable,
 * as from every other operation). A callback, not a promise: the memory store answers at once, and this runs on
 * every item write.
 */
export interface RateCounter {
  incr (key: string, windowMs: number, max: number, callback: (outcome: Counted | Error) => void): void
  /** The hits of `key`'s window (of `windowMs`) so far, counting none; undefined when its window has none. */
  peek (key: string, windowMs: number, callback: (outcome: Counted | undefined | Error) => void): void
  /** Takes back one hit of `key`'s window: the request it counted was not served. */
  refund (key: string): Promise<void>
  /** Forgets `key`'s hits: its window starts again with the next. */
  reset (key: string): Promise<void>
}

/**
 * Everything the service keeps. Items and users handed out are immutable snapshots, each item with its JSON text
 * (`StoredItem`), made once, when it was written. Any operation may reject with a StoreUnavailableError; a write,
 * with an OutcomeUnknownError; adding a user, with a StoreFullError; writing an item, with a QuotaExceededError.
 *
 * Authentication reads the caller's session and user on every request. Each store keeps them at hand (in memory,
 * all of them; on Redis, those this instance has read and is told of every change to), and `cached` hands them
 * over synchronously, since awaiting two promises on every authenticated request costs measurably
 * (docs/performance.md).
 */
export interface Store {
  readonly users: UserStore
  readonly sessions: SessionStore
  readonly items: ItemStore
  readonly idempotencyKeys: IdempotencyKeyStore
  readonly accounts: AccountStore
  readonly outbox: Outbox
  /** The counter of one rate limit; each `name` counts apart from the others. */
  rateCounter (name: string): RateCounter
  /**
   * The time by the store's clock, in milliseconds since the epoch: this process's own for the memory store; for a
   * store that instances share, the store's (Redis's, as this instance reckons it), the one clock they all read.
   */
  now (): number
  /** How many accounts the store holds, and the bytes of their quotas they use (src/domain/quotas.ts). */
  usage (): Promise<StoreUsage>
  /** False while the store cannot serve requests (its server unreachable). */
  available (): boolean
  /**
   * What the store's own server holds at most (Redis's maxmemory), for the sizing rule (src/domain/sizing.ts);
   * undefined where the process's heap bounds it (memory) or nothing does.
   */
  readonly limitBytes?: number | undefined
  /** Releases what the store holds (connections); it serves nothing afterwards. */
  close (): Promise<void>
}

export interface StoreUsage {
  readonly accounts: number
  readonly heldBytes: number
}

/** What serves a request: a store, or a sandbox's catalogue kept in one (which its Sandboxes delete). */
export type ServingStore = Omit<Store, 'close'>
