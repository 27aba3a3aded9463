import type { Item } from '../domain/index.js'

/** An item's strong entity tag: updatedAt increases with every edit of an item, so it names each of its versions. */
export const entityTag = (item: Pick<Item, 'updatedAt'>): string => `"${item.updatedAt}"`

/** Where an item is read: its getItem URL. */
export const itemLocation = (item: Item): string => `/v1/items/${item.id}`

/**
 * The header fields the contract's responses carry about an item, by their lower-cased names, each made from the
 * item: what a handler sets, and what the replay of a recorded create sets for each field the contract requires of
 * the 201 (src/pipeline/idempotency.ts).
 */
export const ITEM_FIELDS: Readonly<Record<string, (item: Item) => string>> = { etag: entityTag, location: itemLocation }
