import type { components } from '../../generated/openapi.js'
import { schemas } from '../../generated/schemas.js'
import type { Item, User } from './index.js'
import { isoTimestamp } from '../runtime/timestamps.js'
import { randomUuid } from '../runtime/uuid.js'

type Schemas = components['schemas']
type Creation = Schemas['CreateItemRequest']
type OptionalKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? K : never }[keyof T]
/** The properties an item must have that a create may leave out: null until an edit sets them. */
type LeftOutAsNull = { readonly [K in Exclude<keyof Item, OptionalKeys<Item>> & OptionalKeys<Creation>]: null }

const itemRequired = new Set<string>(schemas.Item.required)
const creationRequired = new Set<string>(schemas.CreateItemRequest.required)
const LEFT_OUT_AS_NULL = Object.freeze(Object.fromEntries(Object.keys(schemas.CreateItemRequest.properties)
  .filter((name) => itemRequired.has(name) && !creationRequired.has(name)).map((name) => [name, null]))) as LeftOutAsNull

/** What a create or an edit may set of an item, in the contract's words: every other property the service sets. */
export const ITEM_REQUEST_PROPERTIES: readonly string[] = [...new Set([...Object.keys(schemas.CreateItemRequest.properties), ...Object.keys(schemas.UpdateItemRequest.properties)])]

/**
 * A new user, as registering makes one (and SEED_FILE too, with the id it may give), its password already hashed;
 * `now` by the store's clock, which a sandbox's own may have moved.
 */
export const newUser = (registration: Omit<Schemas['RegisterRequest'], 'password'>, emailKey: string, passwordHash: string, now: number, id = randomUuid()): User => ({
  id,
  email: registration.email,
  emailKey,
  passwordHash,
  firstName: registration.firstName,
  lastName: registration.lastName,
  role: registration.role,
  createdAt: isoTimestamp(now)
})

/**
 * A new item of `contributorId`, as creating one makes it (and SEED_FILE too, with the id and status it gives): what
 * the creation says, whatever properties the contract gives it; `now` by the store's clock.
 */
export function newItem (creation: Creation, contributorId: string, now: number, status: Schemas['ItemStatus'] = 'active', id = randomUuid()): Item {
  const createdAt = isoTimestamp(now)
  return { ...LEFT_OUT_AS_NULL, ...creation, id, status, contributorId, createdAt, updatedAt: createdAt }
}
