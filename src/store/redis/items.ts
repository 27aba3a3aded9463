import type { Redis, Result } from 'ioredis'
import { type ItemText, keptItemText, storedItem, TEXT } from '../../domain/serialized.js'
import type { IdempotencyKeyBounds } from '../../domain/bounds.js'
import type { Item } from '../../domain/index.js'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import type { RecentTexts } from '../../runtime/recent-texts.js'
import { creation, edit, isItemRefusal, type ItemWrite, removal } from '../../domain/items.js'
import { type Announcement, type IdempotencyKey, type ItemFilter, type ItemPage, type ItemStore, itemRefused, type OutboxEvent, recordedCreate, type StoredItem, type WriteLimit } from '../store.js'
import { call, type Script } from './commands.js'
import { Change, commit, countedOnce, type Held, PRESENT, type Refused, retried, STALE } from './commit.js'
import { heldRecord, keyRecord, type KeyRecord, makeKeyRoom, makeRoom, recordCreate } from './idempotency-keys.js'
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
  /** How long a create recorded under an idempotency key is remembered, and how many keys each user keeps. */
  idempotencyKeys: IdempotencyKeyBounds
  /** Each account's quota (src/domain/quotas.ts). */
  quotaBytes: number
  /**
   * The texts of the items this instance edited, as its edits left them, for its next edit or delete of each to decide
   * on. A create keeps none: most items are never edited, and a copy of each would be kept for nothing.
   */
  itemTexts: RecentTexts
  logger: { warn: (details: object, message: string) => void }
}

export class RedisItemStore implements ItemStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #outbox: RedisOutbox
  readonly #maxPerContributor: number
  readonly #idempotencyKeys: IdempotencyKeyBounds
  readonly #quotaBytes: number
  // The changes of one item that this instance has in progress run one after another, so that they never retry
  // against each other: only changes made by other instances can make one try again.
  readonly #changesInProgress = new PerKeyQueue()
  readonly #itemTexts: RecentTexts
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
    this.#idempotencyKeys = options.idempotencyKeys
    this.#quotaBytes = options.quotaBytes
    this.#itemTexts = options.itemTexts
  }

  async add (item: Item, announce?: Announcement, key?: IdempotencyKey, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const write = creation(item, key !== undefined, this.#maxPerContributor)
    const event = announce?.(write.item)
    const record = key === undefined ? undefined : keyRecord(this.#keys, key, write.item)
    if (record !== undefined) makeKeyRoom(this.#redis, this.#keys, item.contributorId, record, this.#idempotencyKeys.perUser)
    const counted = countedOnce(limit)
    const outcome = await retried(`item ${item.id}`, async () => {
      const outcome = await this.#counted(() => this.#change(write, event, undefined, record), write, counted())
      // A record read to make room and forgotten by another write meanwhile (0), or the room taken: decided again.
      return outcome === 0 || outcome === QUOTA_PASSED ? STALE : outcome
    })
    // What holds the key ('key recorded'): a vacant key's guard refuses only for one that holds something.
    if (Array.isArray(outcome)) return recordedCreate(heldRecord(outcome[0]!), key!.fingerprint)
    if (isItemRefusal(outcome)) return itemRefused(outcome, item)
    this.#outbox.recorded(event)
    return write.item
  }

  // The write as one change, made only while the item it replaces or removes is as decided on (`read`, its text), and
  // while no refusal the rule names holds, checked in its order; its bytes are counted by #counted.
  #change (write: ItemWrite, event: OutboxEvent | undefined, read?: string, record?: KeyRecord): Change {
    const keys = this.#keys
    const { item, current } = write
    const change = new Change()
    if (read !== undefined) change.guardAsRead(keys.items, item.id, read)
    for (const refusal of write.refusals) {
      if (refusal === 'contributor removed') change.guard(keys.users, item.contributorId, PRESENT, refusal)
      else if (refusal === 'id taken') change.guard(keys.items, item.id, null, refusal)
      // The rule lists 'key recorded' for a create with a key only, which has its record.
      else recordCreate(change, keys, item.contributorId, this.#idempotencyKeys.ttlMs, record!)
    }
    if (write.owned.by !== 0) change.count(keys.itemsOwned, item.contributorId, write.owned.by, write.owned.most, 'owns most')
    if (current === undefined) {
      // Its place in each list: the sequence the commit took.
      const place = change.write('INCR', keys.itemSequence).answerOfLast()
      for (const list of [keys.itemOrder, ...itemListKeys(keys, item)]) change.write('ZADD', list, place, item.id)
      change.write('HSET', keys.items, item.id, item[TEXT])
    } else if (write.removed) {
      change.write('HDEL', keys.items, item.id)
      for (const list of [keys.itemOrder, ...itemListKeys(keys, item)]) change.write('ZREM', list, item.id)
    } else {
      change.write('HSET', keys.items, item.id, item[TEXT])
      if (item.status !== current.status) {
        const [byStatus, , byContributorStatus] = itemListKeys(keys, current)
        const [nextByStatus, , nextByContributorStatus] = itemListKeys(keys, item)
        const place = { key: keys.itemOrder, member: item.id }
        change.write('ZREM', byStatus, item.id).write('ZREM', byContributorStatus, item.id).write('ZADD', nextByStatus, place, item.id).write('ZADD', nextByContributorStatus, place, item.id)
      }
    }
    return change.event(keys.outbox, this.#outbox.eventArguments(event))
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
    const counted = countedOnce(limit)
    return await this.#changed(id, (current) => edit(current, change(current)), announce, counted)
  }

  async remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const counted = countedOnce(limit)
    return await this.#changed(id, (current) => {
      confirm(current)
      return removal(current)
    }, announce, counted)
  }

  // Optimistic concurrency: decides on the item as this instance last edited it, else as read, and writes what the rule
  // decided only if the item is still so. When another instance changed it in between, the commit answers it as it
  // is, and the rule decides again on that: `decide` may run more than once, and must be pure. What it refuses (it
  // throws) on this instance's own copy it is asked again on the item read. Undefined when the item is gone.
  async #changed (id: string, decide: (current: StoredItem) => ItemWrite, announce: Announcement | undefined, counted: () => WriteLimit | undefined): Promise<StoredItem | undefined> {
    return await this.#changesInProgress.run(id, async () => {
      const copy = this.#itemTexts.get(id)
      // What the next try decides on: the item's text, null when it is gone, undefined when it is to be read. What a
      // refused commit answers is never the copy: its guard refused it for differing.
      let known: string | null | undefined = copy
      return await retried(`item ${id}`, async () => {
        const decidedOnOwnCopy = known !== undefined && known === copy
        const json = known === undefined ? await call(this.#redis.hget(this.#keys.items, id)) : known
        known = undefined
        if (json === null) {
          this.#itemTexts.set(id, undefined)
          return undefined
        }
        let write: ItemWrite
        try {
          write = decide(parseItem(json))
        } catch (refusal) {
          if (decidedOnOwnCopy) return STALE
          throw refusal
        }
        const event = announce?.(write.item)
        const outcome = await this.#counted(() => this.#change(write, event, json), write, counted())
        if (outcome === 'contributor removed') return itemRefused(outcome, write.item)
        if (Array.isArray(outcome)) [known] = outcome
        if (outcome !== 1) return STALE
        this.#itemTexts.set(id, write.removed ? undefined : write.item[TEXT])
        this.#outbox.recorded(event)
        return write.item
      })
    })
  }

  // Commits the change `made` with `bytes` more counted against the contributor's quota. When it would pass it, the
  // change is made again with their own oldest records forgotten to make room (makeRoom), counted against the write
  // limit once; refused then, another write took the room meanwhile: the caller decides again.
  async #counted (made: () => Change, { item: { contributorId }, bytes }: ItemWrite, limit: WriteLimit | undefined): Promise<Refused | Held> {
    const keys = this.#keys
    const outcome = await commit(this.#redis, this.#writes, keys, countBytes(made(), keys, contributorId, bytes, this.#quotaBytes), limit)
    if (outcome !== QUOTA_PASSED) return outcome
    const change = made()
    const freed = await makeRoom(this.#redis, keys, change, contributorId, bytes, this.#quotaBytes)
    return await commit(this.#redis, this.#writes, keys, countBytes(change, keys, contributorId, bytes - freed, this.#quotaBytes))
  }
}
