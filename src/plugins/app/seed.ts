import { readFile } from 'node:fs/promises'
import type { ErrorObject, ValidateFunction } from 'ajv'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { components } from '../../../generated/openapi.js'
import { schemas } from '../../../generated/schemas.js'
import { validators } from '../../../generated/validators.js'
import { emailKey } from '../../auth/email.js'
import { parseJson } from '../../runtime/json-text.js'
import { isPlainObject } from '../../runtime/plain-object.js'
import { newItem, newUser } from '../../domain/records.js'
import { itemFields } from '../../domain/serialized.js'
import { IdTakenError, type ServingStore, StoreFullError } from '../../store/store.js'

type Schemas = components['schemas']

/** A seed file that cannot be loaded: its message names the entry at fault. */
export class SeedError extends Error {
  override name = 'SeedError'
}

// The first problem a generated validator found, as `.field: what is wrong` (Ajv lists them whenever it says no).
const problem = ([issue]: [ErrorObject]): string => {
  const field = issue.params.missingProperty ?? issue.params.additionalProperty
  return `${issue.instancePath.replaceAll('/', '.')}${typeof field === 'string' ? `.${field}` : ''}: ${issue.message}`
}

function entries (seed: Record<string, unknown>, key: 'users' | 'items'): unknown[] {
  const listed = seed[key] ?? []
  if (!Array.isArray(listed)) throw new SeedError(`${key}: must be a list`)
  return listed
}

/** Checks one entry against a request body of the contract; `entry` is then that body. */
function valid<T> (validate: ValidateFunction, entry: unknown, where: string): T {
  if (!validate(entry)) throw new SeedError(`${where}${problem(validate.errors as [ErrorObject])}`)
  return entry as T
}

const isItemStatus = (value: unknown): value is Schemas['ItemStatus'] => schemas.ItemStatus.enum.some((status) => status === value)

/**
 * The id an entry gives, if any, so that a test can name a known user or item: a uuid, as the contract's item ids
 * are, and given once in the file. Read by the generated validator of a uuid parameter, which makes it canonical
 * (lower case, no `urn:uuid:`) as it does every uuid a request carries, so a seeded id is the one the API then
 * answers and finds.
 */
function givenId (id: unknown, where: string, given: Map<string, string>): string | undefined {
  if (id === undefined) return undefined
  const read: { itemId: unknown } = { itemId: id }
  if (!validators.getItem.params(read)) throw new SeedError(`${where}.id: must be a uuid`)
  const key = String(read.itemId)
  const first = given.get(key)
  if (first !== undefined) throw new SeedError(`${where}.id: is given already, by ${first}`)
  given.set(key, where)
  return key
}

/**
 * What the store adds, or a SeedError naming the entry `where` when the store refuses it: the id it gives is another
 * `what`'s, or the store (a sandbox's, within SANDBOX_CAPACITY_KIB) has no room for it.
 */
async function added<T> (adding: Promise<T>, where: string, what: 'user' | 'item'): Promise<T> {
  try {
    return await adding
  } catch (error) {
    if (error instanceof IdTakenError) throw new SeedError(`${where}.id: belongs to another ${what} already`)
    if (error instanceof StoreFullError) throw new SeedError(`${where}: the store has no room for it (${error.message})`)
    throw error
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Puts the users and items of `seed` (the shape of a SEED_FILE) into `store`: a SeedError naming the entry at fault. */
    seedStore: (store: ServingStore, seed: unknown) => Promise<void>
  }
}

/**
 * Users and items to start with (a SEED_FILE's, a sandbox's), so an integration test can put a catalogue in a
 * known state. Users are registered and items added as the API would (passwords hashed, emails unique, each item
 * owned by a contributor), without events: nobody changed anything yet. A user registered already (by an earlier
 * start, on a store that outlives it) is skipped with its items; an id the file gives that belongs to another user or
 * item is refused, since the store never overwrites one.
 */
async function seedStore (app: FastifyInstance, store: ServingStore, seed: unknown): Promise<void> {
  if (!isPlainObject(seed)) throw new SeedError('must be an object with users and items')
  const unknownKeys = Object.keys(seed).filter((key) => key !== 'users' && key !== 'items')
  if (unknownKeys.length > 0) throw new SeedError(`has unknown field(s) ${unknownKeys.join(', ')}`)
  const { passwords } = app
  // One at a time, so that seeding never fills the hashing queue.
  const requester = { address: 'seed', stillWanted: () => true }
  const listedAt = new Map<string, number>()
  // Users a start before this one seeded (a store that outlives the process: Redis): they and their items are
  // skipped, so that every instance of a deployment may start with the same SEED_FILE.
  const seededBefore = new Set<string>()
  const givenIds = new Map<string, string>()
  for (const [index, entry] of entries(seed, 'users').entries()) {
    const where = `users[${index}]`
    if (!isPlainObject(entry)) throw new SeedError(`${where}: must be an object`)
    const { id, ...registration } = entry
    const user = valid<Schemas['RegisterRequest']>(validators.registerUser.body, registration, where)
    const userId = givenId(id, where, givenIds)
    const key = emailKey(user.email)
    const first = listedAt.get(key)
    if (first !== undefined) throw new SeedError(`${where}.email: is listed already, as users[${first}]`)
    listedAt.set(key, index)
    const registered = await added(store.users.add(newUser(user, key, await passwords.hash(user.password, requester), store.now(), userId)), where, 'user')
    if (registered !== undefined) continue
    // Registered before: by an earlier start of this file when it has the id the file gives.
    if (userId !== undefined && (await store.users.findByEmailKey(key))?.id !== userId) {
      throw new SeedError(`${where}.id: the email is registered already, with another id`)
    }
    seededBefore.add(key)
  }
  let itemsSkipped = 0
  for (const [index, entry] of entries(seed, 'items').entries()) {
    const where = `items[${index}]`
    if (!isPlainObject(entry)) throw new SeedError(`${where}: must be an object`)
    const { owner, status = 'active', id, ...body } = entry
    const item = valid<Schemas['CreateItemRequest']>(validators.createItem.body, body, where)
    const itemId = givenId(id, where, givenIds)
    if (!isItemStatus(status)) throw new SeedError(`${where}.status: must be one of ${schemas.ItemStatus.enum.join(', ')}`)
    const ownerKey = typeof owner === 'string' ? emailKey(owner) : undefined
    const contributor = ownerKey === undefined ? undefined : await store.users.findByEmailKey(ownerKey)
    if (contributor?.role !== 'contributor' || !listedAt.has(contributor.emailKey)) {
      throw new SeedError(`${where}.owner: must be the email of a contributor in users`)
    }
    if (seededBefore.has(contributor.emailKey)) {
      // Seeded with its owner by an earlier start, unless its id is another's item.
      const existing = itemId === undefined ? undefined : await store.items.get(itemId)
      if (existing !== undefined && itemFields(existing).contributorId !== contributor.id) throw new SeedError(`${where}.id: belongs to another item already`)
      itemsSkipped += 1
      continue
    }
    const stored = await added(store.items.add(newItem(item, contributor.id, store.now(), status, itemId)), where, 'item')
    if (stored === undefined) throw new SeedError(`${where}: its owner already owns as many items as MAX_ITEMS_PER_USER allows`)
  }
  if (seededBefore.size > 0) {
    app.log.info({ users: seededBefore.size, items: itemsSkipped }, 'SEED_FILE: users registered before (by an earlier start) skipped, with their items')
  }
}

/** SEED_FILE's users and items, put into the store before the server is ready (a restart resets them). */
async function seedPlugin (app: FastifyInstance, options: { file: string | undefined }): Promise<void> {
  app.decorate('seedStore', async (store: ServingStore, seed: unknown) => { await seedStore(app, store, seed) })
  const { file } = options
  if (file === undefined) return
  try {
    const text = await readFile(file, 'utf8')
    let seed: unknown
    try {
      seed = parseJson(text)
    } catch (error) {
      throw new SeedError((error as SyntaxError).message)
    }
    await seedStore(app, app.store, seed)
  } catch (error) {
    throw new SeedError(`Cannot load SEED_FILE ${file}: ${error instanceof SeedError ? error.message : String(error)}`)
  }
}

export default fp(seedPlugin, { name: 'seed', dependencies: ['store', 'auth'] })
