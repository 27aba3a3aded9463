import { storedItem, TEXT } from '../../domain/serialized.js'
import type { Item } from '../../domain/index.js'
import { textBytes } from '../../domain/quotas.js'
import { type Announcement, type IdempotencyClaim, IdTakenError, type ItemFilter, type ItemPage, type ItemStore, type StoredItem, UserRemovedError, type WriteLimit } from '../store.js'
import type { MemoryIdempotencyKeys } from './idempotency-keys.js'
import type { MemoryOutbox } from './outbox.js'
import type { MemoryQuotas } from './quotas.js'
import { countWrite, type MemoryRateCounter } from './rate-counter.js'
import type { MemoryUserStore } from './users.js'

interface ItemEntry {
  item: StoredItem
  /** What the item counts against its contributor's quota: its text. */
  bytes: number
  readonly sequence: number
}

/** The items of one scope (the catalogue, or one contributor's), each list in creation order. */
interface ItemLists {
  readonly all: ItemEntry[]
  readonly active: ItemEntry[]
  readonly archived: ItemEntry[]
}

const emptyLists = (): ItemLists => ({ all: [], active: [], archived: [] })

/** The position in `list` (ascending sequence order) of the entry with `sequence`, or where it would go: O(log n). */
function positionOf (list: readonly ItemEntry[], sequence: number): number {
  let low = 0
  let high = list.length
  while (low < high) {
    const middle = (low + high) >>> 1
    // low <= middle < high <= length, so the entry exists.
    if (list[middle]!.sequence < sequence) low = middle + 1
    else high = middle
  }
  return low
}

// A new item goes last; one that changed status goes back to its place by creation.
function insert (list: ItemEntry[], entry: ItemEntry): void {
  if (list.length === 0 || list.at(-1)!.sequence < entry.sequence) list.push(entry)
  else list.splice(positionOf(list, entry.sequence), 0, entry)
}

const remove = (list: ItemEntry[], entry: ItemEntry): void => { list.splice(positionOf(list, entry.sequence), 1) }

export class MemoryItemStore implements ItemStore {
  readonly #outbox: MemoryOutbox
  readonly #idempotencyKeys: MemoryIdempotencyKeys
  readonly #quotas: MemoryQuotas
  readonly #users: MemoryUserStore
  readonly #maxPerContributor: number
  readonly #rateCounter: (name: string) => MemoryRateCounter
  readonly #byId = new Map<string, ItemEntry>()
  // A page is a slice of one list of the catalogue's or of a contributor's, so it costs O(pageSize) whatever its
  // number and filter. A contributor's lists (their length, the count they own) leave with their last item.
  readonly #catalogue = emptyLists()
  readonly #byContributor = new Map<string, ItemLists>()
  #nextSequence = 0

  constructor (maxPerContributor: number, outbox: MemoryOutbox, idempotencyKeys: MemoryIdempotencyKeys, quotas: MemoryQuotas, users: MemoryUserStore, rateCounter: (name: string) => MemoryRateCounter) {
    this.#maxPerContributor = maxPerContributor
    this.#rateCounter = rateCounter
    this.#users = users
    this.#outbox = outbox
    this.#idempotencyKeys = idempotencyKeys
    this.#quotas = quotas
  }

  async add (item: Item, announce?: Announcement, claim?: IdempotencyClaim, limit?: WriteLimit): Promise<StoredItem | undefined> {
    if (claim !== undefined) this.#idempotencyKeys.assertHeld(claim)
    this.#assertAccount(item.contributorId)
    if (this.#byId.has(item.id)) throw new IdTakenError(`item ${item.id} exists already`)
    const owned = this.#byContributor.get(item.contributorId)
    if (owned !== undefined && owned.all.length >= this.#maxPerContributor) return undefined
    countWrite(this.#rateCounter, limit)
    const stored = storedItem(item)
    const bytes = textBytes(stored[TEXT])
    // Room for the item and its record made first, all or nothing; then counted before anything is kept: a refusal
    // leaves the store as it was.
    const recordBytes = claim === undefined ? 0 : this.#idempotencyKeys.recordBytes(stored)
    this.#idempotencyKeys.makeRoom(item.contributorId, bytes + recordBytes, claim)
    this.#quotas.charge(item.contributorId, bytes)
    if (claim !== undefined) this.#idempotencyKeys.record(claim, stored)
    const entry = { item: stored, bytes, sequence: this.#nextSequence++ }
    this.#byId.set(item.id, entry)
    const contributorLists = owned ?? emptyLists()
    if (owned === undefined) this.#byContributor.set(item.contributorId, contributorLists)
    for (const lists of [this.#catalogue, contributorLists]) {
      lists.all.push(entry)
      lists[item.status].push(entry)
    }
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  #assertAccount (contributorId: string): void {
    if (this.#users.cached(contributorId) === undefined) throw new UserRemovedError(`contributor ${contributorId} has no account`)
  }

  async get (id: string): Promise<StoredItem | undefined> {
    return this.#byId.get(id)?.item
  }

  async page (offset: number, limit: number, { status, contributorId }: ItemFilter = {}): Promise<ItemPage> {
    const lists = contributorId === undefined ? this.#catalogue : this.#byContributor.get(contributorId) ?? emptyLists()
    const list = status === undefined ? lists.all : lists[status]
    return { items: list.slice(offset, offset + limit).map((entry) => entry.item), total: list.length }
  }

  async count (): Promise<number> {
    return this.#byId.size
  }

  /** How many items the contributor owns. */
  ownedBy (contributorId: string): number {
    return this.#byContributor.get(contributorId)?.all.length ?? 0
  }

  async update (id: string, change: (current: StoredItem) => Item, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    const previous = entry.item
    this.#assertAccount(previous.contributorId)
    const next = storedItem(change(previous))
    countWrite(this.#rateCounter, limit)
    const bytes = textBytes(next[TEXT])
    this.#idempotencyKeys.makeRoom(previous.contributorId, bytes - entry.bytes)
    this.#quotas.charge(previous.contributorId, bytes - entry.bytes)
    entry.item = next
    entry.bytes = bytes
    if (entry.item.status !== previous.status) {
      // add listed the item under its contributor.
      for (const lists of [this.#catalogue, this.#byContributor.get(previous.contributorId)!]) {
        remove(lists[previous.status], entry)
        insert(lists[entry.item.status], entry)
      }
    }
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  async remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    confirm(entry.item)
    countWrite(this.#rateCounter, limit)
    this.#byId.delete(id)
    this.#quotas.refund(entry.item.contributorId, entry.bytes)
    const { contributorId, status } = entry.item
    const contributorLists = this.#byContributor.get(contributorId)!
    for (const lists of [this.#catalogue, contributorLists]) {
      remove(lists.all, entry)
      remove(lists[status], entry)
    }
    if (contributorLists.all.length === 0) this.#byContributor.delete(contributorId)
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }
}
