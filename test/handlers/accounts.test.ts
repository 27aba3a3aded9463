// Accounts on the operations API (ops/openapi.yaml): listed newest first with what each holds, and removed with
// everything they keep, on each store; every answer here is checked against the operations contract.
import { PassThrough } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import type { operations } from '../../generated/operations/openapi.js'
import type { DomainEvent } from '../../src/plugins/app/events.js'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { loadConfig } from '../../src/config/config.js'
import { Api, newUser } from '../support/api.js'
import { assertMatchesContract } from '../support/contract-checks.js'
import { build, buildTestApp, captureLogs, testEnvironment } from '../support/app.js'
import { opsCall } from '../support/ops.js'
import { freePort } from '../../harness/net.js'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { redisKeys } from '../../src/store/redis/keys.js'
import { connectRedisStore } from '../../src/store/redis/connection.js'
import { redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../support/redis.js'
import { ANY_COMMIT, answerTo, FAULT_OUTCOMES, REDIS_FAULTS, redisProxy, TRUSTING_HEARTBEAT } from '../support/redis-proxy.js'
import { until } from '../support/wait.js'

type AccountList = operations['listAccounts']['responses'][200]['content']['application/json']

async function accounts (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const opsPort = await freePort()
  const ops = `http://127.0.0.1:${opsPort}`
  const removedEvents: Array<DomainEvent<'items.item.removed'>> = []
  const { lines, logStream } = captureLogs()
  const api = await build(t, { ...store, OPS_PORT: String(opsPort), LOG_LEVEL: 'info' }, {
    logStream,
    subscribers: { 'items.item.removed': [(event) => { removedEvents.push(event) }] }
  })
  const password = 'correct horse battery staple'
  const removedUser = newUser({ password })
  const removed = await api.register(removedUser)
  const secondSession = (await api.call('loginUser', { body: { email: removedUser.email, password } })).json()
  const items = [await api.createItem(removed.accessToken), await api.createItem(removed.accessToken)]
  t.equal((await api.call('createItem', { token: removed.accessToken, body: { name: 'keyed' }, headers: { 'idempotency-key': 'k1' } })).statusCode, 201)
  items.push(...(await api.call('listItems', { token: removed.accessToken, query: { contributorId: removed.user.id } })).json().data.filter((item: { name: string }) => item.name === 'keyed'))
  const viewer = await api.register({ role: 'viewer' })
  const newest = await api.register()
  const before = await api.app.store.usage()

  const first = (await opsCall(t, ops, 'listAccounts', 'GET', '/accounts?limit=2')).json as AccountList
  t.same(first.accounts.map((account) => account.id), [newest.user.id, viewer.user.id], 'the newest first')
  t.ok(first.next !== undefined, 'and where the next page begins')
  const second = (await opsCall(t, ops, 'listAccounts', 'GET', `/accounts?limit=2&before=${first.next!}`)).json as AccountList
  t.same(second.accounts.map(({ id, email, role, items }) => ({ id, email, role, items })), [{ id: removed.user.id, email: removedUser.email, role: 'contributor', items: 3 }])
  t.equal(second.next, undefined, 'the last page says no next')
  const none = (await opsCall(t, ops, 'listAccounts', 'GET', `/accounts?before=${first.next!.replace(/\d+/, '1')}`)).json as AccountList
  t.same(none, { accounts: [] }, 'none before the first')
  t.same([first.accounts[0]!.heldBytes, second.accounts[0]!.heldBytes > 0], [0, true], 'what each keeps against its quota: its items and records')
  // As an erasure request names it: in another case than it registered with.
  const byEmail = async (query: string): Promise<string[]> => ((await opsCall(t, ops, 'listAccounts', 'GET', `/accounts?${query}`)).json as AccountList).accounts.map(({ id }) => id)
  t.same(await byEmail(`email=${encodeURIComponent(removedUser.email.toUpperCase())}`), [removed.user.id], 'found by its email, its letters\' case aside')
  t.same(await byEmail(`email=${encodeURIComponent(removedUser.email)}&before=${first.next!}`), [removed.user.id], 'within a page that holds it')
  t.same(await byEmail(`email=${encodeURIComponent(removedUser.email)}&before=${first.next!.replace(/\d+/, '1')}`), [], 'and not past it')
  t.same(await byEmail('email=nobody%40example.com'), [], 'an email no account has: none')
  t.equal((await opsCall(t, ops, 'listAccounts', 'GET', '/accounts?email=not-an-email')).status, 400, 'no email at all: 400')

  // Its id written in upper case: a uuid is one id however it is written.
  t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${removed.user.id.toUpperCase()}`)).status, 204)
  t.match(lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'account removed'),
    [{ audit: 'removeAccount', accountId: removed.user.id, userRemoved: true, itemsRemoved: 3 }], 'audited in the log')
  t.same(removedEvents.map((event) => [event.data.item.id, event.data.actorId]).sort(), items.map((item) => [item.id, removed.user.id]).sort(),
    'each item removed with its event, the account its actor')
  t.equal((await api.call('listItems', { token: newest.accessToken })).statusCode, 200)
  for (const token of [removed.accessToken, secondSession.accessToken]) {
    t.equal((await api.call('listItems', { token })).statusCode, 401, 'its sessions ended')
  }
  t.equal((await api.call('refreshTokens', { body: { refreshToken: secondSession.refreshToken } })).statusCode, 401, 'its refresh tokens too')
  t.equal((await api.call('getItem', { token: newest.accessToken, params: { itemId: items[0]!.id } })).statusCode, 404, 'its items are gone')
  const after = await api.app.store.usage()
  t.same(after, { accounts: before.accounts - 1, heldBytes: 0 }, 'its place among the accounts given back, and everything it kept')
  const listed = (await opsCall(t, ops, 'listAccounts', 'GET', '/accounts')).json as AccountList
  t.same(listed.accounts.map((account) => account.id), [newest.user.id, viewer.user.id], 'no longer listed')

  t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${removed.user.id}`)).status, 204, 'removed again: idempotent')
  const audited = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'account removed')
  t.match(audited.at(-1), { accountId: removed.user.id, userRemoved: false, itemsRemoved: 0 })
  t.match(audited.map((line) => line.reqId), [/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, /^[0-9a-f-]{36}$/],
    'each audit line names its request by a uuid, unique across instances and restarts')
  t.same(await api.app.store.usage(), after, 'nothing given back twice')
  t.equal((await api.call('registerUser', { body: removedUser })).statusCode, 201, 'its email registers again')
  t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', '/accounts/not-a-uuid')).status, 400)
}

const WHAT = 'accounts are listed newest first with what each holds, or by email; one removed goes with its user, sessions, keys, place and items (each with its event), audited, idempotently'

t.test(`memory: ${WHAT}`, async (t) => { await accounts(t, { STORE: 'memory' }) })

t.test(`Redis: ${WHAT}`, { skip: await redisSkip() }, async (t) => { await accounts(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

// An account removed: its items go one by one, each with its event, after its user; until they are gone their bytes
// stay counted, and then nothing of it is left.
async function removedWithItems (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const opsPort = await freePort()
  const api = await build(t, { ...store, OPS_PORT: String(opsPort) })
  await api.register()
  const start = await api.app.store.usage()
  const heavy = await api.register()
  for (const key of ['k1', 'k2', 'k3', 'k4']) {
    const created = await api.call('createItem', { token: heavy.accessToken, body: { name: key, description: 'd'.repeat(10_000) }, headers: { 'idempotency-key': key } })
    t.equal(created.statusCode, 201)
  }
  t.ok(await api.app.store.accounts.remove(heavy.user.id), 'its user removed, its items not yet')
  const removed = await api.app.store.usage()
  t.equal(removed.accounts, start.accounts, 'its place given back')
  t.ok(removed.heldBytes > 4 * 10_000 && removed.heldBytes < 8 * 10_000, 'its items still counted, its records not')
  t.equal((await opsCall(t, `http://127.0.0.1:${opsPort}`, 'removeAccount', 'DELETE', `/accounts/${heavy.user.id}`)).status, 204)
  t.same(await api.app.store.usage(), start, 'its items gone: everything as before it came')
}

const REMOVED = 'an account removed: its items stay counted until they go, then nothing of it is left'

t.test(`memory: ${REMOVED}`, async (t) => { await removedWithItems(t, { STORE: 'memory' }) })

t.test(`Redis: ${REMOVED}`, { skip: await redisSkip() }, async (t) => { await removedWithItems(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

t.test('Redis: a sign-in another instance makes while an account is being removed ends with it: the removal reads again', { skip: await redisSkip() }, async (t) => {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  const keyPrefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: proxy.url, keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, heartbeat: TRUSTING_HEARTBEAT })
  const removing = await build(t, { STORE: 'redis', REDIS_URL: proxy.url, REDIS_KEY_PREFIX: keyPrefix }, { store })
  const other = await build(t, { STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: keyPrefix })
  const password = 'correct horse battery staple'
  const body = newUser({ password })
  const { user } = await other.register(body)
  let refreshToken = ''
  // Between the removal's read and its commit.
  proxy.before(ANY_COMMIT, async () => { refreshToken = (await other.call('loginUser', { body: { email: body.email, password } })).json().refreshToken })
  t.ok(await removing.app.store.accounts.remove(user.id))
  t.not(refreshToken, '', 'signed in meanwhile')
  t.equal((await other.call('refreshTokens', { body: { refreshToken } })).statusCode, 401, 'and that session ended with the account')
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  t.same(await raw.keys(`${keyPrefix}*`).then((names) => names.filter((name) => name.includes(user.id))), [], 'nothing of the account is left')
})

t.test('Redis: a keyed create another instance makes while an account is being removed: the removal reads again, and none of its keys is left', { skip: await redisSkip() }, async (t) => {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  const keyPrefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: proxy.url, keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, heartbeat: TRUSTING_HEARTBEAT })
  const removing = await build(t, { STORE: 'redis', REDIS_URL: proxy.url, REDIS_KEY_PREFIX: keyPrefix }, { store })
  const other = await build(t, { STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: keyPrefix })
  const { user, accessToken } = await other.register()
  let created = 0
  // Between the removal's read and its commit.
  proxy.before(ANY_COMMIT, async () => {
    created = (await other.call('createItem', { token: accessToken, body: { name: 'made meanwhile' }, headers: { 'idempotency-key': 'meanwhile' } })).statusCode
  })
  t.ok(await removing.app.store.accounts.remove(user.id))
  t.equal(created, 201, 'created meanwhile')
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  t.same(await raw.keys(`${keyPrefix}idempotency-key*${user.id}*`), [], 'its key forgotten with the others')
  const { json } = await other.call('listItems', { token: (await other.register()).accessToken, query: { contributorId: user.id } }).then((response) => ({ json: response.json() }))
  t.equal(Number(await raw.hget(`${keyPrefix}account-bytes`, user.id)), Buffer.byteLength(JSON.stringify(json.data[0])), 'and its record\'s bytes: only its item is counted, until the item goes')
})

// As test/store/redis/faults.test.ts does for the public writes.
t.test('Redis: an account\'s removal through every fault is answered as what was done, and the removal sent again removes it', { skip: await redisSkip() }, async (t) => {
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  for (const fault of REDIS_FAULTS) {
    const outcome = FAULT_OUTCOMES[fault]
    await t.test(`${fault}: ${outcome}`, async (t) => {
      const proxy = await redisProxy(REDIS_URL)
      t.teardown(proxy.close)
      const keyPrefix = redisKeyPrefix(t)
      const opsPort = await freePort()
      const ops = `http://127.0.0.1:${opsPort}`
      // Its connection trusted while a reply is held: the heartbeat's own deadline would race the hold.
      const store = await connectRedisStore({ url: proxy.url, keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, heartbeat: TRUSTING_HEARTBEAT })
      const api = await build(t, { STORE: 'redis', REDIS_URL: proxy.url, REDIS_KEY_PREFIX: keyPrefix, OPS_PORT: String(opsPort) }, { store })
      const { user } = await api.register()
      const kept = async (): Promise<number> => await raw.hexists(redisKeys(keyPrefix).users, user.id)
      proxy.arm(ANY_COMMIT, fault)
      const removal = await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${user.id}`)
      t.same([removal.status, proxy.injected], [answerTo(outcome, 204), [fault]], 'answered as what was done')
      if (outcome === 'unknown') proxy.up()
      await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
      t.equal(await kept(), outcome === 'not made' ? 1 : 0, outcome === 'not made' ? 'the account kept' : 'removed')
      t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${user.id}`)).status, 204, 'sent again: removed, or already')
      t.equal(await kept(), 0)
    })
  }
})

/** A real hashing process whose password checks, once done, wait at a gate the test opens: a sign-in held mid-way. */
class GatedHashing extends HashingProcess {
  #reached: () => void = () => {}
  readonly reached = new Promise<void>((resolve) => { this.#reached = resolve })
  #open: () => void = () => {}
  readonly #gate = new Promise<void>((resolve) => { this.#open = resolve })

  override async verify (hash: string | undefined, password: string): Promise<boolean> {
    const matches = await super.verify(hash, password)
    this.#reached()
    await this.#gate
    return matches
  }

  open (): void { this.#open() }
}

/**
 * Two instances of one deployment (one on the memory store, which no other instance shares): `removing` serves the
 * operations API, `serving` the account's requests, its password checks held at a gate, and a hook that tells when a
 * request's token has been checked (preParsing runs after every onRequest hook, before the body is read).
 */
async function deployment (t: Test, store: NodeJS.ProcessEnv): Promise<{ ops: string, removing: Api, serving: FastifyInstance, hashing: GatedHashing, authenticated: Promise<void> }> {
  const opsPort = await freePort()
  const hashing = new GatedHashing(loadConfig(testEnvironment()).passwordHashCost)
  t.teardown(async () => { await hashing.close() })
  const serving = await buildTestApp(t, { ...store, ...(store.STORE === 'memory' ? { OPS_PORT: String(opsPort) } : {}) }, { hashingProcess: hashing })
  let authenticated: () => void = () => {}
  const checked = new Promise<void>((resolve) => { authenticated = resolve })
  serving.addHook('preParsing', async (request) => { if (request.url === '/v1/items' && request.method === 'POST') authenticated() })
  await serving.ready()
  const removing = store.STORE === 'memory' ? new Api(serving) : await build(t, { ...store, OPS_PORT: String(opsPort) })
  return { ops: `http://127.0.0.1:${opsPort}`, removing, serving, hashing, authenticated: checked }
}

async function removalIsFinal (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const { ops, removing, serving, hashing, authenticated } = await deployment(t, store)
  const api = new Api(serving)
  const before = await serving.store.usage()
  const password = 'correct horse battery staple'
  const signingIn = newUser({ password })
  const { user: { id: signingInId } } = await removing.register(signingIn)
  const writer = await removing.register()
  const witness = await removing.register({ role: 'viewer' })

  // A sign-in whose password is being checked while its account is removed.
  const signIn = api.call('loginUser', { body: { email: signingIn.email, password } })
  await hashing.reached
  t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${signingInId}`)).status, 204)
  hashing.open()
  const signedIn = await signIn
  t.equal(signedIn.statusCode, 401, 'the sign-in that lost the race is refused')
  t.match(signedIn.json(), { code: 'INVALID_CREDENTIALS' })

  // A create whose token was checked before its account was removed, and whose body arrives after.
  const body = new PassThrough()
  const payload = JSON.stringify({ name: 'written after the removal' })
  const create = serving.inject({
    method: 'POST',
    url: '/v1/items',
    headers: { authorization: `Bearer ${writer.accessToken}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) },
    payload: body
  })
  await authenticated
  t.equal((await opsCall(t, ops, 'removeAccount', 'DELETE', `/accounts/${writer.user.id}`)).status, 204)
  body.end(payload)
  const created = await create
  assertMatchesContract('POST', '/v1/items', created)
  t.equal(created.statusCode, 401, 'the write in flight is refused')
  t.match(created.json(), { code: 'INVALID_TOKEN' })
  const listed = await api.call('listItems', { token: witness.accessToken, query: { contributorId: writer.user.id } })
  t.equal(listed.json().pagination.total, 0, 'and stores nothing')

  const accounts = (await opsCall(t, ops, 'listAccounts', 'GET', '/accounts')).json as AccountList
  t.same(accounts.accounts.map((account) => account.id), [witness.user.id], 'only the witness is left')
  t.equal((await serving.store.usage()).heldBytes - before.heldBytes, accounts.accounts[0]!.heldBytes, 'nothing is kept but what the accounts listed hold')
}

const FINAL = 'a removal is final: a sign-in that checks its password while the account is removed answers 401 and opens nothing; a create authenticated before it stores nothing after it'

t.test(`memory: ${FINAL}`, async (t) => { await removalIsFinal(t, { STORE: 'memory' }) })

t.test(`Redis, on two instances: ${FINAL}`, { skip: await redisSkip() }, async (t) => { await removalIsFinal(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })
