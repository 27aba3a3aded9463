import type { Item } from '../domain/index.js'

/** An item's strong entity tag: updatedAt increases with every edit of an item, so it names each of its versions. */
export const entityTag = (item: Pick<Item, 'updatedAt'>): string => `"${item.updatedAt}"`

/** Where an item is read: its getItem URL. */
export const itemLocation = (item: Item): string => `/v1/items/${item.id}`
