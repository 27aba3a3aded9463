import type { Redis, Result } from 'ioredis'
import { type ItemText, keptItemText, storedItem, TEXT } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import { type Announcement, ClaimLostError, type IdempotencyClaim, IdTakenError, type ItemFilter, type ItemPage, type ItemStore, type StoredItem, UserRemovedError, type WriteLimit } from '../store.js'
import { textBytes } from '../../domain/quotas.js'
import { call, type Script } from './commands.js'
import { Change, commit, countedOnce, PRESENT, type Refused, retried, STALE } from './commit.js'
import { createRecord, makeRoom, recordCreate } from './idempotency-keys.js'
import { itemListKey, itemListKeys, type RedisKeys } from './keys.js'
import type { RedisOutbox } from './outbox.js'
import { countBytes, QUOTA_PASSED } from './quotas.js'
import type { StoreWrites } from './writes.js'

export const itemScripts = {
  // KEYS: items, the sorted set of the page's filter (itemListKey). ARGV: first rank, last rank. {total, item JSON...}.
  pageItems: {
    numberOfKeys: 2,
    lua: `
local ids = redis.call('ZRANGE', KEYS[2], ARGV[1], ARGV[2])
local total = redis.call('ZCARD', KEYS[2])
if #ids == 0 then return {total} end
return {total, unpack(redis.call('HMGET', KEYS[1], unpack(ids)))}`
  },
  // Puts items into their sets by status and contributor, for a catalogue stored before those sets were kept
  // (1.0.0). KEYS: order. ARGV: the families of the sets by status, by contributor and by both (keys.ts), which the
  // script completes as itemListKey does, then each item's id, status and contributor id, as the service read them
  // (no script parses what a user wrote). 1.
  indexItems: {
    numberOfKeys: 1,
    lua: `
for index = 4, #ARGV, 3 do
  local id, status, contributorId = ARGV[index], ARGV[index + 1], ARGV[index + 2]
  local sequence = redis.call('ZSCORE', KEYS[1], id)
  if sequence then
    redis.call('ZADD', ARGV[1] .. status, sequence, id)
    redis.call('ZADD', ARGV[2] .. contributorId, sequence, id)
    redis.call('ZADD', ARGV[3] .. contributorId .. ':' .. status, sequence, id)
  end
end
return 1`
  }
} as const satisfies Record<string, Script>

declare module 'ioredis' {
  interface RedisCommander<Context> {
    pageItemsBuffer (items: string, list: string, first: number, last: number): Result<[number, ...Array<Buffer | null>], Context>
    indexItems (order: string, byStatus: string, byContributor: string, byContributorStatus: string, ...items: string[]): Result<1, Context>
  }
}

// What a change of an item's commit answers when its contributor has no account (removed); and a create's, when
// its claim lost its key, when another item has its id, and when its contributor owns as many items as allowed.
const CONTRIBUTOR_REMOVED = 'removed'
const CLAIM_LOST = 'claim lost'
const ID_TAKEN = 'id taken'
const OWNS_MOST = 'owns most'

// A page that meets items gone from Redis says so in the log at most this often.
const MISSING_ITEMS_LOG_INTERVAL_MS = 60_000
// The stored value is the item's text as the contract's serializer wrote it (release 1.0.0 stored the same text,
// by JSON.stringify of the fields in the same order), so the text read back compares equal to the text written,
// and a read sends it as Redis answered it (keptItemText).
const parseItem = (json: string): StoredItem => storedItem(JSON.parse(json) as Item)

// Items each scan reads, and each indexItems call indexes: a catalogue of a million items in a thousand of each.
const ITEMS_INDEXED_PER_CALL = 1000

/**
 * Makes sure every item is in its sets by status and contributor, which pages with a filter are cut from: a
 * catalogue stored by 1.0.0, which kept none, is indexed once, at the first start (every write keeps them since).
 * The service reads the items and parses them; a script adds each batch to its sets.
 */
export async function indexItems (redis: Redis, keys: RedisKeys): Promise<void> {
  if (await call(redis.get(keys.itemsIndexed)) !== null) return
  let cursor = '0'
  do {
    const [next, fields] = await call(redis.hscan(keys.items, cursor, 'COUNT', ITEMS_INDEXED_PER_CALL))
    const items: string[] = []
    for (let index = 0; index < fields.length; index += 2) {
      const { status, contributorId } = JSON.parse(fields[index + 1]!) as Item
      items.push(fields[index]!, status, contributorId)
    }
    if (items.length > 0) await call(redis.indexItems(keys.itemOrder, keys.itemsByStatus, keys.itemsByContributor, keys.itemsByContributorStatus, ...items))
    cursor = next
  } while (cursor !== '0')
  await call(redis.set(keys.itemsIndexed, '1'))
}

export interface RedisItemStoreOptions {
  maxPerContributor: number
  /** How long a create recorded under an idempotency key is remembered. */
  recordTtlMs: number
  /** Each account's quota (src/domain/quotas.ts). */
  quotaBytes: number
  logger: { warn: (details: object, message: string) => void }
}

export class RedisItemStore implements ItemStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #outbox: RedisOutbox
  readonly #maxPerContributor: number
  readonly #recordTtlMs: number
  readonly #quotaBytes: number
  // The changes of one item that this instance has in progress run one after another, so that they never retry
  // against each other: only changes made by other instances can make one try again.
  readonly #changesInProgress = new PerKeyQueue()
  readonly #logger: RedisItemStoreOptions['logger']
  // Items in the creation order but gone from the items hash, skipped by pages: counted, and logged at most once
  // an interval.
  #missingSkipped = 0
  #missingLoggedAt = -Infinity

  constructor (redis: Redis, writes: StoreWrites, keys: RedisKeys, outbox: RedisOutbox, options: RedisItemStoreOptions) {
    this.#redis = redis
    this.#writes = writes
    this.#keys = keys
    this.#outbox = outbox
    this.#logger = options.logger
    this.#maxPerContributor = options.maxPerContributor
    this.#recordTtlMs = options.recordTtlMs
    this.#quotaBytes = options.quotaBytes
  }

  async add (item: Item, announce?: Announcement, claim?: IdempotencyClaim, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const keys = this.#keys
    const stored = storedItem(item)
    const json = stored[TEXT]
    const event = announce?.(stored)
    const record = claim === undefined ? undefined : createRecord(keys, claim, json)
    const create = (): Change => {
      const create = new Change().guard(keys.users, item.contributorId, PRESENT, CONTRIBUTOR_REMOVED)
      if (record !== undefined) recordCreate(create, keys, item.contributorId, this.#recordTtlMs, record, CLAIM_LOST)
      create.guard(keys.items, item.id, null, ID_TAKEN).count(keys.itemsOwned, item.contributorId, 1, this.#maxPerContributor, OWNS_MOST)
        .write('INCR', keys.itemSequence)
      // Its place in each list: the sequence the commit took.
      const place = create.answerOfLast()
      for (const list of [keys.itemOrder, ...itemListKeys(keys, stored)]) create.write('ZADD', list, place, item.id)
      return create.write('HSET', keys.items, item.id, json).event(keys.outbox, this.#outbox.eventArguments(event))
    }
    const bytes = textBytes(json) + (record?.bytes ?? 0)
    const counted = countedOnce(limit)
    const outcome = await retried(`item ${item.id}`, async () => {
      const outcome = await this.#counted(create, item.contributorId, bytes, counted())
      // A record read to make room and forgotten by another write meanwhile (0), or the room taken: decided again.
      return outcome === 0 || outcome === QUOTA_PASSED ? STALE : outcome
    })
    if (outcome === OWNS_MOST) return undefined
    if (outcome === CLAIM_LOST) throw new ClaimLostError(`idempotency key ${String(claim?.key)} is held by another request`)
    if (outcome === ID_TAKEN) throw new IdTakenError(`item ${item.id} exists already`)
    if (outcome === CONTRIBUTOR_REMOVED) throw new UserRemovedError(`contributor ${item.contributorId} has no account`)
    this.#outbox.recorded(event)
    return stored
  }

  async get (id: string): Promise<ItemText | undefined> {
    const text = await call(this.#redis.hgetBuffer(this.#keys.items, id))
    return text === null ? undefined : keptItemText(text)
  }

  async page (offset: number, limit: number, filter: ItemFilter = {}): Promise<ItemPage> {
    const [total, ...found] = await call(this.#redis.pageItemsBuffer(this.#keys.items, itemListKey(this.#keys, filter), offset, offset + limit - 1))
    const items: ItemText[] = []
    for (const text of found) if (text !== null) items.push(keptItemText(text))
    if (items.length < found.length) this.#skipMissing(found.length - items.length)
    return { items, total }
  }

  async count (): Promise<number> {
    return await call(this.#redis.zcard(this.#keys.itemOrder))
  }

  // An item is missing only when something else deleted it: an eviction policy other than noeviction (docs/redis.md).
  #skipMissing (count: number): void {
    this.#missingSkipped += count
    if (Date.now() - this.#missingLoggedAt < MISSING_ITEMS_LOG_INTERVAL_MS) return
    this.#missingLoggedAt = Date.now()
    this.#logger.warn({ skipped: this.#missingSkipped },
      'items in item-order are missing from items (evicted? Redis needs maxmemory-policy noeviction); pages skip them')
  }

  async update (id: string, change: (current: StoredItem) => Item, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const keys = this.#keys
    const counted = countedOnce(limit)
    return await this.#changesInProgress.run(id, async () => await this.#change(id, async (current, json) => {
      const stored = storedItem(change(current))
      const next = stored[TEXT]
      const event = announce?.(stored)
      const edit = (): Change => {
        const edit = new Change().guard(keys.items, id, json).guard(keys.users, current.contributorId, PRESENT, CONTRIBUTOR_REMOVED)
          .write('HSET', keys.items, id, next)
        if (stored.status !== current.status) {
          const [byStatus, , byContributorStatus] = itemListKeys(keys, current)
          const [nextByStatus, , nextByContributorStatus] = itemListKeys(keys, stored)
          const place = { key: keys.itemOrder, member: id }
          edit.write('ZREM', byStatus, id).write('ZREM', byContributorStatus, id).write('ZADD', nextByStatus, place, id).write('ZADD', nextByContributorStatus, place, id)
        }
        return edit.event(keys.outbox, this.#outbox.eventArguments(event))
      }
      const outcome = await this.#counted(edit, current.contributorId, textBytes(next) - textBytes(json), counted())
      if (outcome === CONTRIBUTOR_REMOVED) throw new UserRemovedError(`contributor ${current.contributorId} has no account`)
      if (outcome !== 1) return STALE
      this.#outbox.recorded(event)
      return stored
    }))
  }

  async remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const keys = this.#keys
    return await this.#changesInProgress.run(id, async () => await this.#change(id, async (current, json) => {
      confirm(current)
      const event = announce?.(current)
      const removal = new Change().guard(keys.items, id, json).write('HDEL', keys.items, id).write('ZREM', keys.itemOrder, id)
      for (const list of itemListKeys(keys, current)) removal.write('ZREM', list, id)
      countBytes(removal.count(keys.itemsOwned, current.contributorId, -1), keys, current.contributorId, -textBytes(json), this.#quotaBytes)
        .event(keys.outbox, this.#outbox.eventArguments(event))
      if (await commit(this.#redis, this.#writes, keys, removal, limit) !== 1) return STALE
      this.#outbox.recorded(event)
      return current
    }))
  }

  // Commits the change `made` with `bytes` more counted against the contributor's quota. When it would pass it, the
  // change is made again with their own oldest records forgotten to make room (makeRoom), counted against the write
  // limit once; refused then, another write took the room meanwhile: the caller decides again.
  async #counted (made: () => Change, contributorId: string, bytes: number, limit: WriteLimit | undefined): Promise<Refused> {
    const keys = this.#keys
    const outcome = await commit(this.#redis, this.#writes, keys, countBytes(made(), keys, contributorId, bytes, this.#quotaBytes), limit)
    if (outcome !== QUOTA_PASSED) return outcome
    const change = made()
    const freed = await makeRoom(this.#redis, keys, change, contributorId, bytes, this.#quotaBytes)
    return await commit(this.#redis, this.#writes, keys, countBytes(change, keys, contributorId, bytes - freed, this.#quotaBytes))
  }

  /**
   * Optimistic concurrency: reads the item, then has `attempt` change it only if it is still as read. When another
   * instance changed it in between, `attempt` answers STALE, and runs again on the item as it is then. So the
   * callbacks of `update` and `remove` may run more than once, each time on the item as it then was: they must be
   * pure. Undefined when the item is gone.
   */
  async #change (id: string, attempt: (current: StoredItem, json: string) => Promise<StoredItem | typeof STALE>): Promise<StoredItem | undefined> {
    return await retried(`item ${id}`, async () => {
      const json = await call(this.#redis.hget(this.#keys.items, id))
      return json === null ? undefined : await attempt(parseItem(json), json)
    })
  }
}
