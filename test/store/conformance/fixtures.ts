// What the conformance suite's tests build: users, items, events, counts.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import type { Item, User } from '../../../src/domain/index.js'
import type { AccountBounds } from '../../../src/domain/quotas.js'
import { type ItemText, itemFields } from '../../../src/domain/serialized.js'
import type { Announcement, Counted, ItemPage, OutboxEvent, Store, UserStore, WriteLimit } from '../../../src/store/store.js'

export interface OpenStoreOptions {
  maxItemsPerContributor: number
  maxPendingDeliveries?: number
  /** Of their events (src/store/outbox.ts, deliveryBytes). */
  maxPendingDeliveryBytes?: number
  idempotencyKeys?: { ttlMs?: number, perUser?: number }
  accounts?: AccountBounds
}

export type OpenStore = (t: Test, options: OpenStoreOptions) => Promise<Store>

/** A store with room for `maxItemsPerContributor` items a contributor, for one test. */
export type FreshStore = (t: Test, maxItemsPerContributor?: number) => Promise<Store>

export const user = (overrides: Partial<User> = {}): User => ({
  id: randomUUID(),
  email: 'Ada@Example.com',
  emailKey: `ada-${randomUUID()}@example.com`,
  passwordHash: '$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA',
  firstName: 'Ada',
  lastName: 'Lovelace',
  role: 'contributor',
  createdAt: '2026-11-23T00:00:00.000Z',
  ...overrides
})

/** A user added to the store, for the sessions and items a test makes: the store keeps none for a user it has not. */
export const account = async (users: UserStore, overrides: Partial<User> = {}): Promise<string> => (await users.add(user(overrides)))!.id

export const item = (contributorId: string, overrides: Partial<Item> = {}): Item => ({
  id: randomUUID(),
  name: 'An item',
  description: null,
  status: 'active',
  contributorId,
  createdAt: '2026-11-23T00:00:00.000Z',
  updatedAt: '2026-11-23T00:00:00.000Z',
  ...overrides
})

/** The fields of an item as a read hands it out: its text. */
export const read = (text: ItemText | undefined): Item | undefined => text === undefined ? undefined : itemFields(text)
export const readPage = ({ items, total }: ItemPage): { items: Item[], total: number } => ({ items: items.map(itemFields), total })

export const count = async (store: Store, name: string, key: string, windowMs: number): Promise<Counted> =>
  await new Promise((resolve, reject) => {
    store.rateCounter(name).incr(key, windowMs, 10, (outcome) => { if (outcome instanceof Error) reject(outcome); else resolve(outcome) })
  })

export const peek = async (store: Store, name: string, key: string, windowMs: number): Promise<Counted | undefined> =>
  await new Promise((resolve, reject) => {
    store.rateCounter(name).peek(key, windowMs, (outcome) => { if (outcome instanceof Error) reject(outcome); else resolve(outcome) })
  })

export const HOUR = 3_600_000

/** A write limit of `max` an hour on the counter `writes`, for `key`: each count is pushed to `told`; its refusal says at which. */
export const writeLimit = (key: string, max: number, told: Counted[] = []): WriteLimit => ({
  name: 'writes',
  key,
  max,
  windowMs: HOUR,
  counted: (counted) => { told.push(counted) },
  refusal: ({ current }) => new Error(`over, at ${current}`)
})

export const announce = (channel: string): Announcement => (announced) => ({ id: randomUUID(), channel, body: JSON.stringify({ channel, item: announced }) })
export const ADDED = 'items.item.added'
export const EDITED = 'items.item.edited'
export const REMOVED = 'items.item.removed'
export const bodies = (deliveries: ReadonlyArray<{ event: OutboxEvent }>): unknown[] => deliveries.map(({ event }) => JSON.parse(event.body))
