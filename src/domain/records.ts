import type { components } from '../../generated/openapi.js'
import type { Item, User } from './index.js'
import { isoTimestamp } from '../runtime/timestamps.js'
import { randomUuid } from '../runtime/uuid.js'

type Schemas = components['schemas']

/** A new user, as registering makes one (and SEED_FILE too, with the id it may give), its password already hashed. */
export const newUser = (registration: Omit<Schemas['RegisterRequest'], 'password'>, emailKey: string, passwordHash: string, id = randomUuid()): User => ({
  id,
  email: registration.email,
  emailKey,
  passwordHash,
  firstName: registration.firstName,
  lastName: registration.lastName,
  role: registration.role,
  createdAt: isoTimestamp()
})

/** A new item of `contributorId`, as creating one makes it (and SEED_FILE too, with the id and status it gives). */
export function newItem (creation: Schemas['CreateItemRequest'], contributorId: string, status: Schemas['ItemStatus'] = 'active', id = randomUuid()): Item {
  const now = isoTimestamp()
  return {
    id,
    name: creation.name,
    description: creation.description ?? null,
    status,
    contributorId,
    createdAt: now,
    updatedAt: now
  }
}
