import type { Item } from '../../domain/index.js'
import { creation, edit, type ItemWrite, type NamedItemRefusal, ownsTooMany, removal } from '../../domain/items.js'
import { type Announcement, type IdempotencyKey, type ItemFilter, type ItemPage, type ItemStore, itemRefused, recordedCreate, type StoredItem, type WriteLimit } from '../store.js'
import type { MemoryIdempotencyKeys } from './idempotency-keys.js'
import type { MemoryOutbox } from './outbox.js'
import type { MemoryQuotas } from './quotas.js'
import { countWrite, type MemoryRateCounter } from './rate-counter.js'
import type { MemoryUserStore } from './users.js'

interface ItemEntry {
  item: StoredItem
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

  async add (item: Item, announce?: Announcement, key?: IdempotencyKey, limit?: WriteLimit): Promise<StoredItem | undefined> {
    // The rule's first refusal of a create with a key ('key recorded'), which answers with what the key recorded.
    const record = key === undefined ? undefined : this.#idempotencyKeys.recorded(key)
    if (record !== undefined) return recordedCreate(record, key!.fingerprint)
    return this.#write(creation(item, key !== undefined, this.#maxPerContributor), announce, key, limit)
  }

  // Checks what the rule says must hold, counts the write against its limit, makes room in the contributor's quota
  // (a refusal at any step leaves the store as it was), then keeps the item and its record.
  #write (write: ItemWrite, announce: Announcement | undefined, key: IdempotencyKey | undefined, limit: WriteLimit | undefined): StoredItem | undefined {
    const { item, current } = write
    const refusal = write.refusals.find((refusal) => this.#refuses(refusal, item)) ??
      (ownsTooMany(this.ownedBy(item.contributorId), write.owned) ? 'owns most' : undefined)
    if (refusal !== undefined) return itemRefused(refusal, item)
    countWrite(this.#rateCounter, limit)
    this.#idempotencyKeys.makeRoom(item.contributorId, write.bytes)
    this.#quotas.charge(item.contributorId, write.bytes)
    if (key !== undefined && write.recorded) this.#idempotencyKeys.record(key, item)
    if (current === undefined) this.#added(item)
    else if (write.removed) this.#removed(current)
    else this.#replaced(current, item)
    if (announce !== undefined) this.#outbox.record(announce(item))
    return item
  }

  // 'key recorded' is checked by `add`, in the same step, before any other.
  #refuses (refusal: ItemWrite['refusals'][number], item: Item): refusal is Exclude<NamedItemRefusal, 'owns most'> {
    if (refusal === 'contributor removed') return this.#users.cached(item.contributorId) === undefined
    return refusal === 'id taken' && this.#byId.has(item.id)
  }

  #added (item: StoredItem): void {
    const entry = { item, sequence: this.#nextSequence++ }
    this.#byId.set(item.id, entry)
    let contributorLists = this.#byContributor.get(item.contributorId)
    if (contributorLists === undefined) this.#byContributor.set(item.contributorId, contributorLists = emptyLists())
    for (const lists of [this.#catalogue, contributorLists]) {
      lists.all.push(entry)
      lists[item.status].push(entry)
    }
  }

  #replaced (current: StoredItem, item: StoredItem): void {
    // The item was read from the map, and nothing has run since.
    const entry = this.#byId.get(item.id)!
    entry.item = item
    if (item.status === current.status) return
    // add listed the item under its contributor.
    for (const lists of [this.#catalogue, this.#byContributor.get(item.contributorId)!]) {
      remove(lists[current.status], entry)
      insert(lists[item.status], entry)
    }
  }

  #removed (item: StoredItem): void {
    const entry = this.#byId.get(item.id)!
    this.#byId.delete(item.id)
    const contributorLists = this.#byContributor.get(item.contributorId)!
    for (const lists of [this.#catalogue, contributorLists]) {
      remove(lists.all, entry)
      remove(lists[item.status], entry)
    }
    if (contributorLists.all.length === 0) this.#byContributor.delete(item.contributorId)
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
    const current = this.#byId.get(id)?.item
    return current === undefined ? undefined : this.#write(edit(current, change(current)), announce, undefined, limit)
  }

  async remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement, limit?: WriteLimit): Promise<StoredItem | undefined> {
    const current = this.#byId.get(id)?.item
    if (current === undefined) return undefined
    confirm(current)
    return this.#write(removal(current), announce, undefined, limit)
  }
}
