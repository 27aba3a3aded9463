// Both stores held to one model (issue 54): random sequences of operations (register, sign in, refresh, create with
// and without a key, get, list with every filter, edit, archive, delete, replays) run through HTTP on an app on
// the memory store and one on Redis, with names and descriptions drawn from everything the contract accepts (lone
// surrogates, every control character, U+2028/2029, astral and combining characters, empty and maximal lengths,
// null). Every answer is held equal between the two (status, body bar ids, tokens and times, the replay's header)
// and to a plain model of the catalogue kept here. MODEL_RUNS (default 150) and MODEL_SEED set the budget; `npm run
// fuzz` runs 500 sequences. A failure prints the seed and the shrunk sequence.
import { deepStrictEqual } from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import type { Api, Schemas } from '../support/api.js'
import { openApi } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

const SEED = Number(process.env.MODEL_SEED ?? 20261128)
const RUNS = Number(process.env.MODEL_RUNS ?? 150)
const STORES = ['memory', 'redis'] as const
type StoreName = typeof STORES[number]
type PerStore<T> = Record<StoreName, T>

interface ModelSession { tokens: PerStore<{ accessToken: string, refreshToken: string }> }
interface ModelUser { email: string, password: string, role: 'contributor' | 'viewer', ids: PerStore<string>, sessions: ModelSession[] }
interface ModelItem { owner: number, name: string, description: string | null, status: 'active' | 'archived', ids: PerStore<string>, alive: boolean }
interface ModelKey { owner: number, key: string, body: string, item: number }
interface Model { users: ModelUser[], items: ModelItem[], keys: ModelKey[] }
type Real = PerStore<Api>

// A few addresses, so that some registrations meet an email taken, in another case or padded.
const EMAILS = ['ada@example.com', 'grace@example.com', 'edsger@example.com']
const PASSWORD = 'correct horse battery staple'
// No session ends for its count within a sequence: two sessions opened within a millisecond are as old as each other
// on Redis (the conformance suite holds the bound, store by store).
const ENV = { MAX_SESSIONS_PER_USER: '1000' }

// One UTF-16 code unit or code point of each kind the contract lets through: a character counts once whatever it is.
const unit = fc.oneof(
  fc.constantFrom('a', 'Z', ' ', '\u00e9', '\u0301', '\u2028', '\u2029', '\ud800', '\udfff', '\ufeff', '\u{1f600}', '\u{10ffff}', '"', '\\', '<'),
  fc.integer({ min: 0, max: 0x1f }).map((code) => String.fromCharCode(code)),
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 })
)
const text = (minLength: number, maxLength: number): fc.Arbitrary<string> => fc.oneof(
  { weight: 8, arbitrary: fc.string({ unit, minLength, maxLength: Math.min(maxLength, 12) }) },
  { weight: 1, arbitrary: fc.constant('\u{1f600}'.repeat(maxLength)) },
  { weight: 1, arbitrary: fc.constant('\u0001'.repeat(maxLength)) }
)
const name = text(1, 200)
const description = fc.option(text(0, 10_000), { nil: null })

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** The body with every id, token and time replaced by what the model knows it as, so that both stores' compare. */
function normalized (body: unknown, model: Model, store: StoreName): unknown {
  const names = new Map<string, string>([
    ...model.users.map((user, index): [string, string] => [user.ids[store], `user ${index}`]),
    ...model.items.map((item, index): [string, string] => [item.ids[store], `item ${index}`])
  ])
  // An id the model does not know yet (a user or an item just made), by the order it appears in.
  const fresh = (id: string): string => names.get(id) ?? names.set(id, `new id ${names.size}`).get(id)!
  const walk = (value: unknown, key?: string): unknown => {
    if (key === 'createdAt' || key === 'updatedAt') return 'a time'
    if (key === 'accessToken' || key === 'refreshToken') return 'a token'
    if (typeof value === 'string') return UUID.test(value) ? fresh(value) : value
    if (Array.isArray(value)) return value.map((element) => walk(element))
    if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([name, field]) => [name, walk(field, name)]))
    return value
  }
  return walk(body)
}

interface Answers { status: number, memory: LightMyRequestResponse, redis: LightMyRequestResponse }

/** Sends one request, made for each store, to both; holds their answers equal, but for ids, tokens and times. */
// Requests sent to each store, by operation, for the test to say what the sequences did.
const sent = new Map<string, number>()

async function both (real: Real, model: Model, request: (store: StoreName) => Parameters<Api['call']>): Promise<Answers> {
  const operation = request('memory')[0]
  sent.set(operation, (sent.get(operation) ?? 0) + 1)
  const [memory, redis] = await Promise.all(STORES.map(async (store) => await real[store].call(...request(store))))
  const shown = (response: LightMyRequestResponse, store: StoreName): unknown => ({
    status: response.statusCode,
    body: response.body === '' ? undefined : normalized(response.json(), model, store),
    replayed: response.headers['idempotent-replayed'],
    location: response.headers.location === undefined ? undefined : normalized(String(response.headers.location).split('/').at(-1), model, store)
  })
  deepStrictEqual(shown(redis!, 'redis'), shown(memory!, 'memory'), `${request('memory')[0]}: Redis answers otherwise than memory`)
  return { status: memory!.statusCode, memory: memory!, redis: redis! }
}

const expectStatus = (answers: Answers, status: number, what: string): void => {
  if (answers.status !== status) throw new Error(`${what}: ${answers.status} where the model expects ${status}: ${answers.memory.body}`)
}

const session = (user: ModelUser, index: number): ModelSession | undefined => user.sessions[index % Math.max(1, user.sessions.length)]

// The user a command acts as (by its index, wrapped), and the session it acts in (its first live one).
function callerOf (model: Model, index: number): { caller: number, user: ModelUser, open: ModelSession | undefined } {
  const caller = index % model.users.length
  const user = model.users[caller]!
  return { caller, user, open: session(user, 0) }
}

// What an edit or a delete answers: a viewer is refused, an item gone is not found, another's item is refused.
const changeAnswer = (user: ModelUser, caller: number, item: ModelItem, done: number): number =>
  user.role === 'viewer' ? 403 : !item.alive ? 404 : item.owner !== caller ? 403 : done

// The item the model knows as `index`, as the contract shows it.
const shownItem = (model: Model, index: number) => {
  const { owner, name, description, status } = model.items[index]!
  return { id: `item ${index}`, name, description, status, contributorId: `user ${owner}`, createdAt: 'a time', updatedAt: 'a time' }
}

class Register implements fc.AsyncCommand<Model, Real> {
  constructor (readonly email: number, readonly shout: boolean, readonly role: 'contributor' | 'viewer') {}
  check = (): boolean => true
  async run (model: Model, real: Real): Promise<void> {
    const email = this.shout ? EMAILS[this.email]!.toUpperCase() : EMAILS[this.email]!
    const body = { email, password: PASSWORD, firstName: 'A', lastName: 'B', role: this.role }
    const answers = await both(real, model, () => ['registerUser', { body }])
    const taken = model.users.some((user) => user.email === EMAILS[this.email])
    expectStatus(answers, taken ? 409 : 201, 'register')
    if (taken) return
    const tokens = (store: StoreName) => answers[store].json<Schemas['AuthResponse']>()
    model.users.push({
      email: EMAILS[this.email]!,
      password: PASSWORD,
      role: this.role,
      ids: { memory: tokens('memory').user.id, redis: tokens('redis').user.id },
      sessions: [{ tokens: { memory: tokens('memory'), redis: tokens('redis') } }]
    })
  }

  toString = (): string => `register(${this.email}, ${this.shout}, ${this.role})`
}

class SignIn implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly right: boolean) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const user = model.users[this.user % model.users.length]!
    const body = { email: user.email, password: this.right ? user.password : 'wrong horse battery staple' }
    const answers = await both(real, model, () => ['loginUser', { body }])
    expectStatus(answers, this.right ? 200 : 401, 'sign in')
    if (this.right) user.sessions.push({ tokens: { memory: answers.memory.json(), redis: answers.redis.json() } })
  }

  toString = (): string => `signIn(${this.user}, ${this.right})`
}

class Refresh implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly session: number) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const open = session(model.users[this.user % model.users.length]!, this.session)
    if (open === undefined) return
    const answers = await both(real, model, (store) => ['refreshTokens', { body: { refreshToken: open.tokens[store].refreshToken } }])
    expectStatus(answers, 200, 'refresh')
    open.tokens = { memory: answers.memory.json(), redis: answers.redis.json() }
  }

  toString = (): string => `refresh(${this.user}, ${this.session})`
}

class Create implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly name: string, readonly description: string | null, readonly key: string | undefined) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const { caller: owner, user, open } = callerOf(model, this.user)
    if (open === undefined) return
    const body = { name: this.name, description: this.description }
    const headers: Record<string, string> = this.key === undefined ? {} : { 'idempotency-key': this.key }
    const answers = await both(real, model, (store) => ['createItem', { token: open.tokens[store].accessToken, body, headers }])
    const recorded = model.keys.find((key) => key.owner === owner && key.key === this.key)
    if (user.role === 'viewer') return expectStatus(answers, 403, 'a viewer\'s create')
    if (recorded !== undefined && recorded.body !== JSON.stringify(body)) return expectStatus(answers, 422, 'a key with another body')
    expectStatus(answers, 201, 'create')
    if (recorded !== undefined) {
      deepStrictEqual(answers.memory.headers['idempotent-replayed'], 'true', 'a replay says so')
      deepStrictEqual(normalized(answers.memory.json(), model, 'memory'), { ...shownItem(model, recorded.item), ...JSON.parse(recorded.body) as object, status: 'active' }, 'replayed as created')
      return
    }
    const made = (store: StoreName) => answers[store].json<Schemas['Item']>()
    model.items.push({ owner, ...body, status: 'active', ids: { memory: made('memory').id, redis: made('redis').id }, alive: true })
    if (this.key !== undefined) model.keys.push({ owner, key: this.key, body: JSON.stringify(body), item: model.items.length - 1 })
    deepStrictEqual(normalized(made('memory'), model, 'memory'), shownItem(model, model.items.length - 1), 'created as sent')
  }

  toString = (): string => `create(${this.user}, ${JSON.stringify(this.name)}, ${JSON.stringify(this.description)}, ${String(this.key)})`
}

class Get implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly item: number) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0 && model.items.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const { open } = callerOf(model, this.user)
    if (open === undefined) return
    const index = this.item % model.items.length
    const item = model.items[index]!
    const answers = await both(real, model, (store) => ['getItem', { token: open.tokens[store].accessToken, params: { itemId: item.ids[store] } }])
    expectStatus(answers, item.alive ? 200 : 404, 'get')
    if (item.alive) deepStrictEqual(normalized(answers.memory.json(), model, 'memory'), shownItem(model, index), 'as the model holds it')
  }

  toString = (): string => `get(${this.user}, ${this.item})`
}

class List implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly status: 'active' | 'archived' | undefined, readonly contributor: number | undefined, readonly page: number, readonly pageSize: number) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const { open } = callerOf(model, this.user)
    if (open === undefined) return
    const contributor = this.contributor === undefined ? undefined : this.contributor % model.users.length
    const query = (store: StoreName) => ({
      page: String(this.page),
      pageSize: String(this.pageSize),
      ...(this.status === undefined ? {} : { status: this.status }),
      ...(contributor === undefined ? {} : { contributorId: model.users[contributor]!.ids[store] })
    })
    const answers = await both(real, model, (store) => ['listItems', { token: open.tokens[store].accessToken, query: query(store) }])
    expectStatus(answers, 200, 'list')
    const kept = model.items.flatMap((item, index) =>
      item.alive && (this.status === undefined || item.status === this.status) && (contributor === undefined || item.owner === contributor) ? [index] : [])
    const page = kept.slice((this.page - 1) * this.pageSize, this.page * this.pageSize).map((index) => shownItem(model, index))
    deepStrictEqual(normalized(answers.memory.json(), model, 'memory'), { data: page, pagination: { page: this.page, pageSize: this.pageSize, total: kept.length } }, 'the model\'s page')
  }

  toString = (): string => `list(${this.user}, ${String(this.status)}, ${String(this.contributor)}, ${this.page}, ${this.pageSize})`
}

class Edit implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly item: number, readonly change: { name?: string, description?: string | null, status?: 'active' | 'archived' }) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0 && model.items.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const { caller, user, open } = callerOf(model, this.user)
    if (open === undefined) return
    const index = this.item % model.items.length
    const item = model.items[index]!
    const answers = await both(real, model, (store) => ['updateItem', { token: open.tokens[store].accessToken, params: { itemId: item.ids[store] }, body: this.change }])
    expectStatus(answers, changeAnswer(user, caller, item, 200), 'edit')
    if (answers.status !== 200) return
    Object.assign(item, this.change)
    deepStrictEqual(normalized(answers.memory.json(), model, 'memory'), shownItem(model, index), 'edited as sent')
  }

  toString = (): string => `edit(${this.user}, ${this.item}, ${JSON.stringify(this.change)})`
}

class Delete implements fc.AsyncCommand<Model, Real> {
  constructor (readonly user: number, readonly item: number) {}
  check = (model: Readonly<Model>): boolean => model.users.length > 0 && model.items.length > 0
  async run (model: Model, real: Real): Promise<void> {
    const { caller, user, open } = callerOf(model, this.user)
    if (open === undefined) return
    const item = model.items[this.item % model.items.length]!
    const answers = await both(real, model, (store) => ['deleteItem', { token: open.tokens[store].accessToken, params: { itemId: item.ids[store] } }])
    expectStatus(answers, changeAnswer(user, caller, item, 204), 'delete')
    item.alive &&= answers.status !== 204
  }

  toString = (): string => `delete(${this.user}, ${this.item})`
}

const index = fc.nat(7)
const role = fc.constantFrom('contributor' as const, 'contributor' as const, 'viewer' as const)
const key = fc.option(fc.constantFrom('k1', 'k2', 'k3'), { nil: undefined })
const change = fc.record({ name, description, status: fc.constantFrom('active' as const, 'archived' as const) }, { requiredKeys: [] })
  .filter((body) => Object.keys(body).length > 0)
const commands = [
  fc.tuple(fc.nat(EMAILS.length - 1), fc.boolean(), role).map(([email, shout, role]) => new Register(email, shout, role)),
  fc.tuple(index, fc.boolean()).map(([user, right]) => new SignIn(user, right)),
  fc.tuple(index, index).map(([user, session]) => new Refresh(user, session)),
  fc.tuple(index, name, description, key).map(([user, name, description, key]) => new Create(user, name, description, key)),
  fc.tuple(index, index).map(([user, item]) => new Get(user, item)),
  fc.tuple(index, fc.option(fc.constantFrom('active' as const, 'archived' as const), { nil: undefined }), fc.option(index, { nil: undefined }), fc.integer({ min: 1, max: 3 }),
    fc.integer({ min: 1, max: 4 })).map(([user, status, contributor, page, pageSize]) => new List(user, status, contributor, page, pageSize)),
  fc.tuple(index, index, change).map(([user, item, change]) => new Edit(user, item, change)),
  fc.tuple(index, index).map(([user, item]) => new Delete(user, item))
]

t.test(`both stores answer every sequence as the model does (${RUNS} sequences, seed ${SEED})`, { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  let run = 0
  await fc.assert(fc.asyncProperty(fc.commands(commands, { maxCommands: 30, size: 'max' }), async (sequence) => {
    run += 1
    const memory = await openApi({ ...ENV, STORE: 'memory' })
    const redis = await openApi({ ...ENV, STORE: 'redis', REDIS_KEY_PREFIX: `${prefix}${run}:` })
    try {
      await fc.asyncModelRun(() => ({ model: { users: [], items: [], keys: [] }, real: { memory: memory.api, redis: redis.api } }), sequence)
    } finally {
      await Promise.all([memory.close(), redis.close()])
    }
  }), { seed: SEED, numRuns: RUNS })
  t.pass(`${RUNS} sequences of up to 30 operations: ${[...sent].map(([operation, count]) => `${count} ${operation}`).join(', ')}`)
})
