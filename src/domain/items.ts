// The rules of an item's writes, said once for every store: each answers what a write changes and what must hold for
// it to be made, which a store checks, in the order given, in the atomic step that commits it
// (src/store/memory/items.ts, src/store/redis/items.ts). The write limit counts a write once every refusal has
// passed, and its quota comes after that.
import type { Item } from './index.js'
import { textBytes } from './quotas.js'
import { type StoredItem, storedItem, TEXT } from './serialized.js'

/** What refuses an item's write, found in the write's own atomic step. */
export type ItemRefusal =
  /** Its contributor has no account (removed, its items going with it). */
  | 'contributor removed'
  /** The create's Idempotency-Key names a create of its caller's already (made meanwhile, by a request sent at once). */
  | 'key recorded'
  /** Another item has its id. */
  | 'id taken'
  /** Its contributor owns as many items as each may. */
  | 'owns most'

/** The refusals a store answers by name; 'key recorded' answers with what the key records. */
export type NamedItemRefusal = Exclude<ItemRefusal, 'key recorded'>

const ITEM_REFUSALS: ReadonlySet<unknown> = new Set<NamedItemRefusal>(['contributor removed', 'id taken', 'owns most'])

/** Whether a store's answer is one of the refusals it answers by name. */
export const isItemRefusal = (answer: unknown): answer is NamedItemRefusal => ITEM_REFUSALS.has(answer)

/** What a write of an item does, and what must hold for it to be made. */
export interface ItemWrite {
  /** The item as the write leaves it; a removal's, as it was. */
  readonly item: StoredItem
  /** The item it replaces or removes, as it was read; undefined for a create. */
  readonly current: StoredItem | undefined
  readonly removed: boolean
  /** Checked in this order; 'owns most' after these, where `owned` names a bound. */
  readonly refusals: ReadonlyArray<Exclude<ItemRefusal, 'owns most'>>
  /** Items its contributor owns more (fewer when negative); refused ('owns most') when that passes `most`. */
  readonly owned: { readonly by: number, readonly most?: number }
  /** Bytes more counted against its contributor's quota (fewer when negative), src/domain/quotas.ts. */
  readonly bytes: number
  /** Whether the create is recorded under its Idempotency-Key (its record's bytes in `bytes`). */
  readonly recorded: boolean
}

/** What an idempotency record of a create counts against its account's quota: its item's text. */
export const recordBytes = (item: StoredItem): number => textBytes(item[TEXT])

/** A create recorded under its Idempotency-Key: a digest of its request, and the item it made. */
export interface CreateRecord {
  readonly fingerprint: string
  readonly item: StoredItem
}

/**
 * What a create sent with a key its caller recorded a create under gets: that create's item when the request is the
 * same (its fingerprint), undefined when the key names another request.
 */
export const replayOf = (record: CreateRecord, fingerprint: string): StoredItem | undefined =>
  record.fingerprint === fingerprint ? record.item : undefined

// What each write checks, in order: made once, not at every write.
const CREATE_REFUSALS: ItemWrite['refusals'] = ['contributor removed', 'id taken']
// A create recorded under its key is answered before anything else refuses it: a retry gets the first one's answer.
const RECORDED_CREATE_REFUSALS: ItemWrite['refusals'] = ['key recorded', 'contributor removed', 'id taken']
const EDIT_REFUSALS: ItemWrite['refusals'] = ['contributor removed']
const REMOVAL_REFUSALS: ItemWrite['refusals'] = []

/** A create, recorded under its Idempotency-Key when it has one, by a contributor who owns at most `maxPerContributor`. */
export function creation (item: Item, recorded: boolean, maxPerContributor: number): ItemWrite {
  const stored = storedItem(item)
  return {
    item: stored,
    current: undefined,
    removed: false,
    refusals: recorded ? RECORDED_CREATE_REFUSALS : CREATE_REFUSALS,
    owned: { by: 1, most: maxPerContributor },
    bytes: textBytes(stored[TEXT]) + (recorded ? recordBytes(stored) : 0),
    recorded
  }
}

/** `current` replaced by `next`. */
export function edit (current: StoredItem, next: Item): ItemWrite {
  const stored = storedItem(next)
  return { item: stored, current, removed: false, refusals: EDIT_REFUSALS, owned: { by: 0 }, bytes: textBytes(stored[TEXT]) - textBytes(current[TEXT]), recorded: false }
}

/** `current` removed: allowed whatever became of its contributor, whose removal removes their items this way. */
export function removal (current: StoredItem): ItemWrite {
  return { item: current, current, removed: true, refusals: REMOVAL_REFUSALS, owned: { by: -1 }, bytes: -textBytes(current[TEXT]), recorded: false }
}

/** Whether a contributor owning `owned` items is refused the write ('owns most'). */
export const ownsTooMany = (owned: number, { by, most }: ItemWrite['owned']): boolean => most !== undefined && by > 0 && owned + by > most
