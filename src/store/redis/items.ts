import type { Redis, Result } from 'ioredis'
import { type ItemText, keptItemText, storedItem, TEXT } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import { type Announcement, ClaimLostError, type IdempotencyClaim, IdTakenError, type ItemFilter, type ItemPage, type ItemStore, type StoredItem, UserRemovedError, type WriteLimit } from '../store.js'
import { CAPACITY, CAPACITY_KEYS, type CapacityKeys, capacityKeys, isRefusal, itemBytes, type Refusal, refusal } from './capacity.js'
import { call, type Script, type WriteDeadline } from './commands.js'
import { Change, commit, PRESENT, type Refused, retried, STALE } from './commit.js'
import { claimArguments, type IdempotencyKeyBounds, pushOutRecords, RECORD_CLAIM } from './idempotency-keys.js'
import { itemListKey, itemListKeys, type RedisKeys } from './keys.js'
import { APPEND_EVENT, type EventArguments, type RedisOutbox } from './outbox.js'
import { type Limited, limitArguments, limitedOutcome } from './rate-counter.js'
import { type StoreWrites, writeScript } from './writes.js'

export const itemScripts = {
  // A limited write script (writeScript): its KEYS and ARGV follow the write limit's. KEYS: items, order, sequence,
  // owned per contributor, outbox, the item's sets by status, by contributor and by both (itemListKeys), the
  // claim's keys (RECORD_CLAIM), the contributor's idempotency records (idempotencyKeys), users, and the capacity
  // keys (CAPACITY). ARGV: id, contributor id, item as JSON, items one contributor may own, the claim's arguments,
  // and the event (APPEND_EVENT). 1 when added, 0 over the quota, 2 when the claim lost its key, 3 when another item
  // has the id, 4 when the contributor has no account (removed), 'account' or 'shared' when the contributor's room
  // cannot take the item and its record, even once their own older records are gone, -1 over the write limit.
  addItem: {
    numberOfKeys: 13 + CAPACITY_KEYS,
    lua: writeScript(APPEND_EVENT + CAPACITY + RECORD_CLAIM, `
capacityAt(13)
if redis.call('HEXISTS', KEYS[12], ARGV[2]) == 0 then return refuse(4) end
if not holdsClaim(9, 5) then return refuse(2) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return refuse(3) end
if tonumber(redis.call('HGET', KEYS[4], ARGV[2]) or '0') >= tonumber(ARGV[4]) then return refuse(0) end
if overLimit() then return refuse(-1) end
local bytes = itemBytes(ARGV[3])
local refused = makeRoom(ARGV[2], bytes + recordBytes(9, 5), KEYS[11], KEYS[9], now)
if refused then return refuse(refused) end
charge(ARGV[2], bytes)
chargeRecord(9, 5, ARGV[2])
redis.call('HINCRBY', KEYS[4], ARGV[2], '1')
-- A text once: Redis formats a number it is given each time it is given one.
local sequence = tostring(redis.call('INCR', KEYS[3]))
for index = 6, 8 do redis.call('ZADD', KEYS[index], sequence, ARGV[1]) end
redis.call('ZADD', KEYS[2], sequence, ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
recordClaim(9, 5)
appendEvent(KEYS[5], eventAt(9))
return 1`, { limited: true })
  },
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
    addItem (limitCounter: string, items: string, order: string, sequence: string, owned: string, outbox: string, byStatus: string, byContributor: string,
      byContributorStatus: string, claimKey: string, claimUserKeys: string, contributorKeys: string, users: string, ...args: [...CapacityKeys, deadline: WriteDeadline, outcomeKey: string,
        limitMax: number, limitWindowMs: number, id: string, contributorId: string, item: string, maxPerContributor: number, claim: string, record: string, ttlMs: number,
        perUser: number, ...event: EventArguments]
    ): Result<Limited<-1 | 0 | 1 | 2 | 3 | 4 | Refusal>, Context>
    pageItemsBuffer (items: string, list: string, first: number, last: number): Result<[number, ...Array<Buffer | null>], Context>
    indexItems (order: string, byStatus: string, byContributor: string, byContributorStatus: string, ...items: string[]): Result<1, Context>
  }
}

// What an edit's commit answers when the item's contributor has no account (removed).
const CONTRIBUTOR_REMOVED = 'removed'

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
  idempotencyKeys: IdempotencyKeyBounds
  logger: { warn: (details: object, message: string) => void }
}

export class RedisItemStore implements ItemStore {
  readonly #redis: Redis
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #outbox: RedisOutbox
  readonly #maxPerContributor: number
  readonly #idempotencyKeys: IdempotencyKeyBounds
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
    this.#idempotencyKeys = options.idempotencyKeys
  }

  async add (item: Item, announce?: Announcement, claim?: IdempotencyClaim, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const keys = this.#keys
    const stored = storedItem(item)
    const json = stored[TEXT]
    const event = announce?.(stored)
    const recorded = claimArguments(keys, this.#idempotencyKeys, claim, json)
    const [limitCounter, limitMax, limitWindowMs] = limitArguments(keys, limit)
    const added = limitedOutcome(await this.#writes.run(async (deadline, outcomeKey) => await this.#redis.addItem(limitCounter, keys.items, keys.itemOrder,
      keys.itemSequence, keys.itemsOwned, keys.outbox, ...itemListKeys(keys, stored), ...recorded.keys, `${keys.idempotencyKeys}${item.contributorId}`, keys.users,
      ...capacityKeys(keys), deadline, outcomeKey, limitMax, limitWindowMs, item.id, item.contributorId, json, this.#maxPerContributor, ...recorded.arguments,
      ...this.#outbox.eventArguments(event))), limit)
    if (isRefusal(added)) throw refusal(added)
    if (added === 0) return undefined
    if (added === 2) throw new ClaimLostError(`idempotency key ${String(claim?.key)} is held by another request`)
    if (added === 3) throw new IdTakenError(`item ${item.id} exists already`)
    if (added === 4) throw new UserRemovedError(`contributor ${item.contributorId} has no account`)
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
      const outcome = await this.#charged(edit, current, itemBytes(next) - itemBytes(json), limit)
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
      removal.count(keys.itemsOwned, current.contributorId, -1).chargeAccount(keys, current.contributorId, -itemBytes(json), Date.parse(current.createdAt))
        .event(keys.outbox, this.#outbox.eventArguments(event))
      if (await commit(this.#redis, this.#writes, keys, removal, limit) !== 1) return STALE
      this.#outbox.recorded(event)
      return current
    }))
  }

  // Commits the change `made` of `item` with `bytes` more charged to its contributor. When their room cannot take
  // it, the change is made again with their own oldest records pushed out to make room (pushOutRecords), counted
  // against the write limit once; refused then, another write took the room meanwhile: it is read again (0).
  async #charged (made: () => Change, item: StoredItem, bytes: number, limit: WriteLimit | undefined): Promise<Refused> {
    const createdAtMs = Date.parse(item.createdAt)
    const outcome = await commit(this.#redis, this.#writes, this.#keys, made().chargeAccount(this.#keys, item.contributorId, bytes, createdAtMs), limit)
    if (!isRefusal(outcome)) return outcome
    const change = made()
    const freed = await pushOutRecords(this.#redis, this.#keys, change, item.contributorId, bytes, refusal(outcome))
    return await commit(this.#redis, this.#writes, this.#keys, change.chargeAccount(this.#keys, item.contributorId, bytes - freed, createdAtMs))
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
