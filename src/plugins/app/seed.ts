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
import { IdTakenError, QuotaExceededError, type ServingStore, StoreFullError } from '../../store/store.js'

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
 * `what`'s, or the store (a sandbox's, within SANDBOX_ACCOUNTS) has no room for it: no account left, or past its owner's quota.
 */
async function added<T> (adding: Promise<T>, where: string, what: 'user' | 'item'): Promise<T> {
  try {
    return await adding
  } catch (error) {
    if (error instanceof IdTakenError) throw new SeedError(`${where}.id: belongs to another ${what} already`)
    if (error instanceof StoreFullError || error instanceof QuotaExceededError) throw new SeedError(`${where}: the store has no room for it (${error.message})`)
    throw error
  }
}

/** A user of a seed, checked, its password hashed: what registering it needs, and no password in the clear. */
interface PreparedUser {
  readonly where: string
  readonly id: string | undefined
  readonly registration: Omit<Schemas['RegisterRequest'], 'password'>
  readonly emailKey: string
  readonly passwordHash: string
}

/** An item of a seed, checked: its owner's email key, its status, and its body as a create's. */
interface PreparedItem {
  readonly where: string
  readonly id: string | undefined
  readonly ownerKey: string
  readonly status: Schemas['ItemStatus']
  readonly body: Schemas['CreateItemRequest']
}

/**
 * A seed checked against the contract and its passwords hashed, before any store is touched: what a store is seeded
 * from, and what a sandbox keeps (as JSON) for its resets, so that no fixture's password is kept in the clear and a
 * reset hashes nothing again.
 */
export interface PreparedSeed {
  readonly prepared: true
  readonly users: readonly PreparedUser[]
  readonly items: readonly PreparedItem[]
}

const isPreparedSeed = (seed: unknown): seed is PreparedSeed => isPlainObject(seed) && seed.prepared === true

declare module 'fastify' {
  interface FastifyInstance {
    /** Checks a seed (the shape of a SEED_FILE) and hashes its passwords: a SeedError naming the entry at fault. */
    prepareSeed: (seed: unknown) => Promise<PreparedSeed>
    /**
     * The seed a store kept (a sandbox's, for its resets) as it was prepared; one kept as it was sent, by an instance
     * that kept seeds so, is prepared now. Never what a request sends: it would skip every check.
     */
    keptSeed: (kept: unknown) => Promise<PreparedSeed>
    /** Puts the users and items of a prepared seed into `store`: a SeedError naming the entry the store refuses. */
    seedStore: (store: ServingStore, seed: PreparedSeed) => Promise<void>
  }
}

/**
 * Checks each entry as the API would check it (each user as `registerUser`'s body, each item as `createItem`'s, each
 * item owned by a contributor of the seed, each id given once) and hashes each user's password, one at a time, so
 * that seeding never fills the hashing queue.
 */
async function prepareSeed (app: FastifyInstance, seed: unknown): Promise<PreparedSeed> {
  if (!isPlainObject(seed)) throw new SeedError('must be an object with users and items')
  const unknownKeys = Object.keys(seed).filter((key) => key !== 'users' && key !== 'items')
  if (unknownKeys.length > 0) throw new SeedError(`has unknown field(s) ${unknownKeys.join(', ')}`)
  const requester = { address: 'seed', stillWanted: () => true }
  const roles = new Map<string, { index: number, role: Schemas['Role'] }>()
  const givenIds = new Map<string, string>()
  const users: PreparedUser[] = []
  for (const [index, entry] of entries(seed, 'users').entries()) {
    const where = `users[${index}]`
    if (!isPlainObject(entry)) throw new SeedError(`${where}: must be an object`)
    const { id, ...registration } = entry
    const { password, ...user } = valid<Schemas['RegisterRequest']>(validators.registerUser.body, registration, where)
    const userId = givenId(id, where, givenIds)
    const key = emailKey(user.email)
    const first = roles.get(key)
    if (first !== undefined) throw new SeedError(`${where}.email: is listed already, as users[${first.index}]`)
    roles.set(key, { index, role: user.role })
    users.push({ where, id: userId, registration: user, emailKey: key, passwordHash: await app.passwords.hash(password, requester) })
  }
  const items: PreparedItem[] = []
  for (const [index, entry] of entries(seed, 'items').entries()) {
    const where = `items[${index}]`
    if (!isPlainObject(entry)) throw new SeedError(`${where}: must be an object`)
    const { owner, status = 'active', id, ...body } = entry
    const item = valid<Schemas['CreateItemRequest']>(validators.createItem.body, body, where)
    const itemId = givenId(id, where, givenIds)
    if (!isItemStatus(status)) throw new SeedError(`${where}.status: must be one of ${schemas.ItemStatus.enum.join(', ')}`)
    const ownerKey = typeof owner === 'string' ? emailKey(owner) : ''
    if (roles.get(ownerKey)?.role !== 'contributor') throw new SeedError(`${where}.owner: must be the email of a contributor in users`)
    items.push({ where, id: itemId, ownerKey, status, body: item })
  }
  return { prepared: true, users, items }
}

/**
 * Users are registered and items added as the API would (emails unique, each item owned by a contributor), without
 * events: nobody changed anything yet. A user registered already (by an earlier start, on a store that outlives it)
 * is skipped with its items; an id the seed gives that belongs to another user or item is refused, since the store
 * never overwrites one.
 */
async function seedStore (app: FastifyInstance, store: ServingStore, seed: PreparedSeed): Promise<void> {
  // Users a start before this one seeded (a store that outlives the process: Redis): they and their items are
  // skipped, so that every instance of a deployment may start with the same SEED_FILE.
  const seededBefore = new Set<string>()
  for (const { where, id, registration, emailKey: key, passwordHash } of seed.users) {
    const registered = await added(store.users.add(newUser(registration, key, passwordHash, store.now(), id)), where, 'user')
    if (registered !== undefined) continue
    // Registered before: by an earlier start of this file when it has the id the file gives.
    if (id !== undefined && (await store.users.findByEmailKey(key))?.id !== id) {
      throw new SeedError(`${where}.id: the email is registered already, with another id`)
    }
    seededBefore.add(key)
  }
  let itemsSkipped = 0
  for (const { where, id, ownerKey, status, body } of seed.items) {
    const contributor = await store.users.findByEmailKey(ownerKey)
    if (contributor?.role !== 'contributor') throw new SeedError(`${where}.owner: the email is registered already, not as a contributor`)
    if (seededBefore.has(ownerKey)) {
      // Seeded with its owner by an earlier start, unless its id is another's item.
      const existing = id === undefined ? undefined : await store.items.get(id)
      if (existing !== undefined && itemFields(existing).contributorId !== contributor.id) throw new SeedError(`${where}.id: belongs to another item already`)
      itemsSkipped += 1
      continue
    }
    const stored = await added(store.items.add(newItem(body, contributor.id, store.now(), status, id)), where, 'item')
    if (stored === undefined) throw new SeedError(`${where}: its owner already owns as many items as MAX_ITEMS_PER_USER allows`)
  }
  if (seededBefore.size > 0) {
    app.log.info({ users: seededBefore.size, items: itemsSkipped }, 'SEED_FILE: users registered before (by an earlier start) skipped, with their items')
  }
}

/** SEED_FILE's users and items, put into the store before the server is ready (a restart resets them). */
async function seedPlugin (app: FastifyInstance, options: { file: string | undefined }): Promise<void> {
  app.decorate('prepareSeed', async (seed: unknown) => await prepareSeed(app, seed))
  app.decorate('keptSeed', async (kept: unknown) => isPreparedSeed(kept) ? kept : await prepareSeed(app, kept))
  app.decorate('seedStore', async (store: ServingStore, seed: PreparedSeed) => { await seedStore(app, store, seed) })
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
    await seedStore(app, app.store, await prepareSeed(app, seed))
  } catch (error) {
    throw new SeedError(`Cannot load SEED_FILE ${file}: ${error instanceof SeedError ? error.message : String(error)}`)
  }
}

export default fp(seedPlugin, { name: 'seed', dependencies: ['store', 'auth'] })
