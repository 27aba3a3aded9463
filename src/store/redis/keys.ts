import type { Item } from '../../domain/index.js'
import type { ItemFilter } from '../store.js'

/**
 * Every key the Redis store writes, under the deployment's prefix (REDIS_KEY_PREFIX), named here and nowhere else:
 * the scripts receive these names as keys or, where they find a key's id in data they read (a session's tokens),
 * the family's prefix to put before it. docs/redis.md describes each key's contents.
 */
export interface RedisKeys {
  /** Hash: user id → the user as JSON. */
  readonly users: string
  /** Hash: email key (the address folded) → user id. */
  readonly userEmails: string
  /** Sorted set: user ids by their place in the order of registration (score: userSequence). */
  readonly userOrder: string
  /** String: the last place of registration given. */
  readonly userSequence: string
  /** Family, + session id. Hash: user, expires, rotated, current, previous, replaced (token hashes). */
  readonly session: string
  /**
   * Family, + an instance's id (a UUID each start). String: its heartbeat, written every interval through its main
   * connection under the session family, so that the invalidation Redis sends it proves both connections alive.
   */
  readonly sessionHeartbeat: string
  /** Family, + refresh token hash. String: the session id, expiring with the session. */
  readonly refreshToken: string
  /** Family, + user id. Sorted set: the user's session ids, scored by their end. */
  readonly userSessions: string
  /** Hash: item id → the item as JSON. */
  readonly items: string
  /** Sorted set: item ids by creation (score: itemSequence). */
  readonly itemOrder: string
  /** Family, + a status. Sorted set: the ids of the items in that status, as itemOrder. */
  readonly itemsByStatus: string
  /** Family, + a contributor id. Sorted set: the ids of the contributor's items, as itemOrder. */
  readonly itemsByContributor: string
  /** Family, + a contributor id + ':' + a status. Sorted set: the ids of the contributor's items in it, as itemOrder. */
  readonly itemsByContributorStatus: string
  /** String: 1 once every item is in the sets by status and contributor (indexItems). */
  readonly itemsIndexed: string
  /** String: the last creation number given. */
  readonly itemSequence: string
  /** Hash: contributor id → items they own. */
  readonly itemsOwned: string
  /**
   * Stream: events not yet fanned out to their subscribers; a sandbox's, its events kept to be listed, with the bytes
   * of their bodies counted in a string of this name + '-bytes', which APPEND_EVENT names.
   */
  readonly outbox: string
  /** Family, + subscriber id + ':' + due|events|attempts|dropped|cursor|dead-letters|dead-letter-order (webhookKeys). */
  readonly webhook: string
  /** Family, + limit name + ':' + the caller's key. String: hits in the window, expiring with it. */
  readonly rateLimit: string
  /**
   * Family, + limit name. Sorted set: the limit's counters (rateLimit keys) by when their windows end, which keeps
   * them within the limit's number of keys (rate-counter.ts).
   */
  readonly rateLimitKeys: string
  /**
   * Family, + user id + ':' + an Idempotency-Key of theirs. String, JSON: a recorded create ({ fingerprint, item },
   * expiring after the keys' time to live); a release before 1.2.0 wrote a claim there too ({ token, fingerprint },
   * expiring within 60 s).
   */
  readonly idempotencyKey: string
  /**
   * Family, + user id. Sorted set: the user's idempotencyKey names, scored by when each was recorded.
   */
  readonly idempotencyKeys: string
  /**
   * Family, + a uuid of the write's. String, JSON: the reply of a write script (writeScript), expiring after 30 s,
   * for an instance that lost the reply to ask for it (RedisWrites).
   */
  readonly writeOutcome: string
  /**
   * Hash: accounts (how many the store holds, against MAX_ACCOUNTS), held (the bytes of their quotas they use, in
   * all) and storeId (the data's id, made by the first start on an empty Redis: connection.ts).
   */
  readonly capacity: string
  /** Hash: account (user id) → the bytes of its quota it uses (src/domain/quotas.ts): its items' texts and its records'. */
  readonly accountBytes: string
  /** Hash: a recorded idempotencyKey's name → "<user id> <bytes>", what the record counts against its user's quota. */
  readonly recordBytes: string
  /** Sorted set: the names of recordBytes, scored by when Redis expires each (ms). */
  readonly recordExpiries: string
  /**
   * The keys of the capacity ledger kept before quotas (hashes account-floors, account-session-bytes and
   * capacity-charges, sorted set capacity-expiries): deleted by the first start that finds them (quotas.ts).
   */
  readonly ledger: readonly string[]
  /** Hash: sandbox id → "<generation> <clock ahead ms>": its keys' generation (sandbox), and how far its clock was moved on. */
  readonly sandboxes: string
  /** Hash: sandbox id → the fixtures it was created with, checked and their passwords hashed (JSON), which a reset puts back. */
  readonly sandboxFixtures: string
  /** Sorted set: sandbox ids, scored by when a request last used each (ms, Redis's clock). */
  readonly sandboxUse: string
  /** Hash: sandbox id → when it was made (ms, Redis's clock). */
  readonly sandboxCreated: string
  /**
   * Hash: sandbox id → its receiver as JSON ({ subscriber, url, secret }): where its events are delivered, as
   * `subscriber` of its outbox (a new one each time a receiver is set).
   */
  readonly sandboxReceivers: string
  /** String: counts the changes of sandboxReceivers (and of their sandboxes' generations), for instances to follow them. */
  readonly sandboxReceiversVersion: string
  /** Set: "<sandbox id>:<generation>" of generations a reset or a deletion left over, until their keys are deleted. */
  readonly sandboxLeftovers: string
  /**
   * Family, + sandbox id. Stream: the sandbox's journal (src/domain/journal.ts), an entry's text in its field
   * `entry`; written only while the sandbox is registered, emptied by a reset and deleted with it.
   */
  readonly sandboxJournal: string
  /** Channel: the id of each sandbox whose journal changed, published by the change, which every instance hears (tracking.ts). */
  readonly sandboxJournals: string
  /**
   * Family, + sandbox id + ':' + generation + ':'. Every key of one sandbox's catalogue, named as these (redisKeys of
   * that prefix); a reset starts the next generation, and the keys of the one before are deleted.
   */
  readonly sandbox: string
}

export const redisKeys = (prefix: string): RedisKeys => ({
  users: `${prefix}users`,
  userEmails: `${prefix}user-emails`,
  userOrder: `${prefix}user-order`,
  userSequence: `${prefix}user-sequence`,
  session: `${prefix}session:`,
  sessionHeartbeat: `${prefix}session:heartbeat:`,
  refreshToken: `${prefix}refresh-token:`,
  userSessions: `${prefix}user-sessions:`,
  items: `${prefix}items`,
  itemOrder: `${prefix}item-order`,
  itemsByStatus: `${prefix}items-by-status:`,
  itemsByContributor: `${prefix}items-by-contributor:`,
  itemsByContributorStatus: `${prefix}items-by-contributor-status:`,
  itemsIndexed: `${prefix}items-indexed`,
  itemSequence: `${prefix}item-sequence`,
  itemsOwned: `${prefix}items-owned`,
  outbox: `${prefix}outbox`,
  webhook: `${prefix}webhook:`,
  rateLimit: `${prefix}rate-limit:`,
  rateLimitKeys: `${prefix}rate-limit-keys:`,
  idempotencyKey: `${prefix}idempotency-key:`,
  idempotencyKeys: `${prefix}idempotency-keys:`,
  writeOutcome: `${prefix}write-outcome:`,
  capacity: `${prefix}capacity`,
  accountBytes: `${prefix}account-bytes`,
  recordBytes: `${prefix}record-bytes`,
  recordExpiries: `${prefix}record-expiries`,
  ledger: ['account-floors', 'account-session-bytes', 'capacity-charges', 'capacity-expiries'].map((name) => `${prefix}${name}`),
  sandboxes: `${prefix}sandboxes`,
  sandboxFixtures: `${prefix}sandbox-fixtures`,
  sandboxUse: `${prefix}sandbox-use`,
  sandboxCreated: `${prefix}sandbox-created`,
  sandboxReceivers: `${prefix}sandbox-receivers`,
  sandboxReceiversVersion: `${prefix}sandbox-receivers-version`,
  sandboxLeftovers: `${prefix}sandbox-leftovers`,
  sandboxJournal: `${prefix}sandbox-journal:`,
  sandboxJournals: `${prefix}sandbox-journals`,
  sandbox: `${prefix}sandbox:`
})

/** The sorted set a filter's pages are cut from: itemOrder itself when it keeps every item. */
export function itemListKey (keys: RedisKeys, { status, contributorId }: ItemFilter): string {
  if (contributorId === undefined) return status === undefined ? keys.itemOrder : `${keys.itemsByStatus}${status}`
  return status === undefined ? `${keys.itemsByContributor}${contributorId}` : `${keys.itemsByContributorStatus}${contributorId}:${status}`
}

/** The sorted sets by status and contributor that hold `item` (itemOrder aside). */
export const itemListKeys = (keys: RedisKeys, { status, contributorId }: Pick<Item, 'status' | 'contributorId'>): [string, string, string] =>
  [itemListKey(keys, { status }), itemListKey(keys, { contributorId }), itemListKey(keys, { status, contributorId })]

export interface WebhookKeys {
  /** Sorted set: event ids pending delivery, scored by when each may be taken next. */
  readonly due: string
  /** Hash: event id → "channel body". */
  readonly events: string
  /** Hash: event id → attempts taken. */
  readonly attempts: string
  /** Hash: event id → the traceparent of the request that caused it, for the events that have one. */
  readonly traceparents: string
  /** String: events dropped while the subscriber's deliveries were at their bound, until an instance logs them. */
  readonly dropped: string
  /** String: bytes of the pending deliveries' events, for their bound (RedisOutboxBounds.deliveryBytes). */
  readonly pendingBytes: string
  /**
   * String, of a listing's subscriber (a sandbox's receiver): "<stream id> <place>" of the newest event fanned out
   * to it (LISTING_END); none while it is not subscribed.
   */
  readonly cursor: string
  /** Hash: event id → the dead letter as JSON ({ channel, traceparent, attempts, failure, failedAt }). */
  readonly deadLetters: string
  /** Hash: event id → the dead letter's event (its body, as it was to be sent). */
  readonly deadLetterEvents: string
  /** Sorted set: the dead letters' event ids, scored by their position (deadLetterPosition when kept): oldest first. */
  readonly deadLetterOrder: string
  /** String: bytes of the dead letters' events, for their bound. */
  readonly deadLetterBytes: string
  /** String: the position of the newest dead letter ever kept. */
  readonly deadLetterPosition: string
}

export function webhookKeys (keys: RedisKeys, subscriber: string): WebhookKeys {
  const base = `${keys.webhook}${subscriber}:`
  return {
    due: `${base}due`,
    events: `${base}events`,
    attempts: `${base}attempts`,
    traceparents: `${base}traceparents`,
    dropped: `${base}dropped`,
    cursor: `${base}cursor`,
    pendingBytes: `${base}pending-bytes`,
    deadLetters: `${base}dead-letters`,
    deadLetterEvents: `${base}dead-letter-events`,
    deadLetterOrder: `${base}dead-letter-order`,
    deadLetterBytes: `${base}dead-letter-bytes`,
    deadLetterPosition: `${base}dead-letter-position`
  }
}
