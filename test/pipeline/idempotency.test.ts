import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { DomainEvent } from '../../src/plugins/app/events.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import { PENDING_RELEASES } from '../../src/pipeline/idempotency.js'
import { type IdempotencyKeyStore, type ItemStore, OutcomeUnknownError, type Store, StoreUnavailableError } from '../../src/store/store.js'
import { rateLimitItems } from '../support/api.js'
import { build, captureLogs } from '../support/app.js'
import { until } from '../support/wait.js'

// Longer than a failover's few seconds, shorter than a claim's lease.
const STORE_AWAY_MS = 6_000

const settle = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

interface HeldStore {
  store: Store
  /** Resolves once `count` creates are held in the store. */
  held: (count: number) => Promise<void>
  /** Lets the create held `index`-th go on. */
  release: (index: number) => void
}

/**
 * The memory store, with every item add held until the test lets it go on: a create then stays running for as long
 * as the test needs. The claims take the leases given in `leasesMs` in turn, then the service's own.
 */
function heldStore (leasesMs: number[] = [], keys: Partial<IdempotencyKeyStore> = {}): HeldStore {
  const store = createMemoryStore({ maxItemsPerContributor: 1 })
  const waiting: Array<() => void> = []
  let arrived = (): void => {}
  const add: ItemStore['add'] = async (...args) => {
    await new Promise<void>((resolve) => { waiting.push(resolve); arrived() })
    return await store.items.add(...args)
  }
  // The store's own methods, bound to it (they use its private fields), but for add.
  const items = new Proxy(store.items, {
    get: (target, name) => name === 'add' ? add : (Reflect.get(target, name) as (...args: unknown[]) => unknown).bind(target)
  })
  const idempotencyKeys: IdempotencyKeyStore = {
    claim: async (claim, leaseMs, limit) => await store.idempotencyKeys.claim(claim, leasesMs.shift() ?? leaseMs, limit),
    release: async (claim) => { await store.idempotencyKeys.release(claim) },
    sweep: async (now, limit) => await store.idempotencyKeys.sweep(now, limit),
    ...keys
  }
  return {
    store: { ...store, items, idempotencyKeys },
    held: async (count) => { while (waiting.length < count) await new Promise<void>((resolve) => { arrived = resolve }) },
    release: (index) => { waiting[index]?.() }
  }
}

t.test('a create retried with its Idempotency-Key gets the first response again, and nothing else happens', async (t) => {
  const added: Array<DomainEvent<'items.item.added'>> = []
  const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '3' }, { subscribers: { 'items.item.added': [(event) => { added.push(event) }] } })
  const { accessToken } = await api.register()
  const key = randomUUID()
  const create = async (body: object) => await api.call('createItem', { token: accessToken, body, headers: { 'idempotency-key': key } })

  const first = await create({ name: 'Difference engine', description: 'Babbage' })
  t.equal(first.statusCode, 201)
  t.equal(first.headers['idempotent-replayed'], undefined, 'the first response is no replay')
  t.match(rateLimitItems(first.headers.ratelimit), { 'item-writes': { r: 2 } })
  const item = first.json()
  await api.call('updateItem', { token: accessToken, params: { itemId: item.id }, body: { name: 'Analytical engine' } })
  await settle()

  for (const body of [{ name: 'Difference engine', description: 'Babbage' }, { description: 'Babbage', name: 'Difference engine' }]) {
    const again = await create(body)
    t.equal(again.statusCode, 201, 'the same body, in any order of its fields')
    t.equal(again.headers['idempotent-replayed'], 'true')
    t.same(again.json(), item, 'the item as the first response had it, not as it is now')
    t.same([again.headers.location, again.headers.etag], [first.headers.location, first.headers.etag])
    t.same(rateLimitItems(again.headers['ratelimit-policy']), { 'item-writes': { q: 3, w: 60 } }, 'the limit is named')
    t.equal(again.headers.ratelimit, undefined, 'and counted nothing')
  }
  await settle()
  t.equal(added.length, 1, 'one event, for the first')
  const listed = await api.call('listItems', { token: accessToken })
  t.equal(listed.json().pagination.total, 1, 'one item')
  t.equal((await api.call('createItem', { token: accessToken, body: { name: 'another' } })).statusCode, 201, 'the replays spent none of the limit')
})

t.test('the same key with another body is 422 IDEMPOTENCY_KEY_REUSED, and creates nothing', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const headers = { 'idempotency-key': 'order-17' }
  t.equal((await api.call('createItem', { token: accessToken, body: { name: 'first' }, headers })).statusCode, 201)
  for (const body of [{ name: 'second' }, { name: 'first', description: 'more' }]) {
    const reused = await api.call('createItem', { token: accessToken, body, headers })
    t.equal(reused.statusCode, 422)
    t.equal(reused.json().code, 'IDEMPOTENCY_KEY_REUSED')
  }
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1)
})

t.test('the same key while its first request runs is 409 IDEMPOTENCY_KEY_IN_USE; once it has answered, its answer', async (t) => {
  const { store, held, release } = heldStore()
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register()
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': 'k' } })
  const first = create()
  await held(1)
  const meanwhile = await Promise.all([create(), create()])
  t.same(meanwhile.map((response) => [response.statusCode, response.json().code]), [[409, 'IDEMPOTENCY_KEY_IN_USE'], [409, 'IDEMPOTENCY_KEY_IN_USE']])
  release(0)
  const created = await first
  t.equal(created.statusCode, 201)
  const retried = await create()
  t.same([retried.statusCode, retried.headers['idempotent-replayed'], retried.json()], [201, 'true', created.json()])
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1, 'four requests, one item')
})

t.test('a key claimed by a create that still runs is 409; once it is recorded, its answer; with another body, 422', async (t) => {
  const { store, held, release } = heldStore()
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register()
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': 'k' } })
  const first = create()
  await held(1)
  const meanwhile = await create()
  t.same([meanwhile.statusCode, meanwhile.json().code], [409, 'IDEMPOTENCY_KEY_IN_USE'])
  release(0)
  const created = await first
  const retried = await create()
  t.same([retried.statusCode, retried.headers['idempotent-replayed'], retried.json()], [201, 'true', created.json()])
  const other = await api.call('createItem', { token: accessToken, body: { name: 'another' }, headers: { 'idempotency-key': 'k' } })
  t.same([other.statusCode, other.json().code], [422, 'IDEMPOTENCY_KEY_REUSED'])
})

t.test('twenty parallel creates with one key make one item: every 201 names it, the others are told it runs', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const headers = { 'idempotency-key': randomUUID() }
  const responses = await Promise.all(Array.from({ length: 20 }, async () =>
    await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers })))
  const created = responses.filter((response) => response.statusCode === 201)
  t.ok(responses.every((response) => response.statusCode === 201 || response.json().code === 'IDEMPOTENCY_KEY_IN_USE'))
  t.equal(new Set(created.map((response) => response.json().id)).size, 1)
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1)
})

t.test('a create whose claim lapsed (its instance stalled) and was taken by a retry stores nothing: 409, and the retry\'s item stands', async (t) => {
  const { store, held, release } = heldStore([1])
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register()
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': 'k' } })
  const stalled = create()
  await held(1)
  await sleep(5)
  const retry = create()
  await held(2)
  release(0)
  t.same((await stalled).json().code, 'IDEMPOTENCY_KEY_IN_USE')
  release(1)
  t.equal((await retry).statusCode, 201)
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1)
})

t.test('a key that cannot be freed after a failed create is logged, and the failure answered as it was', async (t) => {
  let tries = 0
  const { store, held, release } = heldStore([], { release: async () => { tries += 1; throw new StoreUnavailableError('down') } })
  const { lines, logStream } = captureLogs()
  const api = await build(t, { LOG_LEVEL: 'warn' }, { store, logStream })
  const { accessToken } = await api.register()
  const answers = []
  for (const [index, name] of ['first', 'over the quota'].entries()) {
    const response = api.call('createItem', { token: accessToken, body: { name }, headers: { 'idempotency-key': name } })
    await held(index + 1)
    release(index)
    answers.push((await response).statusCode)
  }
  t.same(answers, [201, 403])
  // Said at the first failure; the tries again go on in the background, unsaid.
  await until('the failed release to be logged', () => lines.join('').includes('freeing an idempotency key failed; it is tried again until its claim\'s lease ends'))
  await until('the release to be tried again', () => tries >= 3)
  t.equal(lines.filter((line) => line.includes('freeing an idempotency key failed')).length, 1, 'once')
})

// A memory store whose idempotency keys do as `overrides` say, each given the store's own method.
function keysFailing (overrides: { [Name in keyof IdempotencyKeyStore]?: (own: IdempotencyKeyStore[Name]) => IdempotencyKeyStore[Name] }): Store {
  const store = createMemoryStore({ maxItemsPerContributor: 1 })
  const own = store.idempotencyKeys
  const keys: IdempotencyKeyStore = {
    claim: own.claim.bind(own),
    release: own.release.bind(own),
    sweep: own.sweep.bind(own)
  }
  return { ...store, idempotencyKeys: { ...keys, ...(overrides.claim === undefined ? {} : { claim: overrides.claim(keys.claim) }), ...(overrides.release === undefined ? {} : { release: overrides.release(keys.release) }) } }
}

t.test('a key whose freeing failed is freed again in the background: the retry the answer asks for goes through', async (t) => {
  let failures = 2
  const store = keysFailing({
    release: (release) => async (claim) => {
      if (failures-- > 0) throw new StoreUnavailableError('a failover under way')
      await release(claim)
    }
  })
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register({ role: 'contributor' })
  const create = async (key: string): Promise<string> => (await api.call('createItem', { token: accessToken, body: { name: key }, headers: { 'idempotency-key': key } })).json().code ?? 'created'
  t.equal(await create('first'), 'created')
  const answers = [await create('over the quota')]
  while (answers.at(-1) === 'IDEMPOTENCY_KEY_IN_USE' || answers.length === 1) answers.push(await create('over the quota'))
  t.equal(answers[0], 'ITEM_QUOTA_EXCEEDED', 'refused past the quota of one, which frees its key')
  t.equal(answers.at(-1), 'ITEM_QUOTA_EXCEEDED', 'the retry runs again once the key is freed')
  t.ok(failures < 0, 'freed after two tries failed')
})

// A failover, or Redis out of reach, may last longer than a few seconds; the retry its 503 or 504 asked for must not
// be refused 409 for the rest of the claim's lease once the store is back.
t.test('a key whose freeing fails for as long as the store is away is freed once it is back, within the claim\'s lease', async (t) => {
  let away = true
  let failures = 0
  // The claims whose freeing failed, and how many of them a later try freed.
  const failed = new Set<string>()
  let freed = 0
  const store = keysFailing({
    release: (release) => async (claim) => {
      if (away) {
        failures += 1
        failed.add(claim.token)
        throw new StoreUnavailableError('Redis is unreachable')
      }
      await release(claim)
      if (failed.has(claim.token)) freed += 1
    }
  })
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register({ role: 'contributor' })
  const create = async (key: string): Promise<string> => (await api.call('createItem', { token: accessToken, body: { name: key }, headers: { 'idempotency-key': key } })).json().code ?? 'created'
  t.equal(await create('first'), 'created')
  t.equal(await create('over the quota'), 'ITEM_QUOTA_EXCEEDED', 'refused past the quota of one, which would free its key')
  await sleep(STORE_AWAY_MS)
  const triedWhileAway = failures
  away = false
  const answers = [await create('over the quota')]
  while (answers.at(-1) === 'IDEMPOTENCY_KEY_IN_USE') answers.push(await create('over the quota'))
  t.ok(triedWhileAway > 1, `tried again while the store was away: ${triedWhileAway} times`)
  t.equal(answers.at(-1), 'ITEM_QUOTA_EXCEEDED', 'the retry runs again once the key is freed')
  t.same({ failures, freed }, { failures: triedWhileAway, freed: 1 }, 'freed by the first try once the store was back, not by the lease\'s end')
})

t.test('no more than PENDING_RELEASES keys wait to be freed again: past them, a key waits for its lease', async (t) => {
  // Each key's first freeing fails; the tries again wait until the store is back.
  const failedOnce = new Set<string>()
  let back = (): void => {}
  const storeBack = new Promise<void>((resolve) => { back = resolve })
  const store = keysFailing({
    release: (release) => async (claim) => {
      if (!failedOnce.has(claim.key)) {
        failedOnce.add(claim.key)
        throw new StoreUnavailableError('Redis is unreachable')
      }
      await storeBack
      await release(claim)
    }
  })
  const { lines, logStream } = captureLogs()
  const api = await build(t, { RATE_LIMIT: 'off', LOG_LEVEL: 'warn' }, { store, logStream })
  const { accessToken } = await api.register({ role: 'contributor' })
  const create = async (key: string): Promise<string> => (await api.call('createItem', { token: accessToken, body: { name: key }, headers: { 'idempotency-key': key } })).json().code ?? 'created'
  t.equal(await create('first'), 'created')
  const keys = Array.from({ length: PENDING_RELEASES + 1 }, (_, index) => `over the quota ${index}`)
  const refused = new Set<string>()
  for (const key of keys) refused.add(await create(key))
  t.same([...refused], ['ITEM_QUOTA_EXCEEDED'], 'each refused past the quota of one, which frees its key')
  t.equal(lines.filter((line) => line.includes('it is free again when its claim\'s lease ends')).length, 1, 'the one past the bound is left to its lease')
  back()
  const [firstKey, lastKey] = [keys[0]!, keys.at(-1)!]
  const answers = [await create(firstKey)]
  while (answers.at(-1) === 'IDEMPOTENCY_KEY_IN_USE') answers.push(await create(firstKey))
  t.equal(answers.at(-1), 'ITEM_QUOTA_EXCEEDED', 'a key waiting to be freed again is freed once the store is back')
  t.equal(await create(lastKey), 'IDEMPOTENCY_KEY_IN_USE', 'the one past the bound is held until its lease ends')
})

t.test('a claim whose outcome is unknown is freed as a failed request\'s is: the retry is not refused while its lease lasts', async (t) => {
  let unknown = true
  const store = keysFailing({
    claim: (claim) => async (held, leaseMs) => {
      const outcome = await claim(held, leaseMs)
      if (!unknown) return outcome
      unknown = false
      throw new OutcomeUnknownError('the reply was lost')
    }
  })
  const api = await build(t, {}, { store })
  const { accessToken } = await api.register({ role: 'contributor' })
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': 'unknown' } })
  t.equal((await create()).statusCode, 504)
  t.equal((await create()).statusCode, 201)
})

t.test('keys are each caller\'s own, and a request without one is never a replay', async (t) => {
  const api = await build(t)
  const [ada, grace] = [await api.register(), await api.register()]
  const headers = { 'idempotency-key': 'same-key' }
  const body = { name: 'n' }
  const mine = await api.call('createItem', { token: ada.accessToken, body, headers })
  const theirs = await api.call('createItem', { token: grace.accessToken, body, headers })
  t.same([mine.statusCode, theirs.statusCode, theirs.headers['idempotent-replayed']], [201, 201, undefined])
  t.not(mine.json().id, theirs.json().id)
  const plain = await Promise.all([1, 2].map(async () => await api.call('createItem', { token: ada.accessToken, body })))
  t.same(plain.map((response) => response.statusCode), [201, 201], 'without a key, two creates are two items')
})

t.test('a create that fails is not remembered: its retry with the key runs again', async (t) => {
  const api = await build(t, { MAX_ITEMS_PER_USER: '1' })
  const { accessToken } = await api.register()
  const owned = await api.createItem(accessToken)
  const headers = { 'idempotency-key': randomUUID() }
  const refused = await api.call('createItem', { token: accessToken, body: { name: 'over the quota' }, headers })
  t.equal(refused.json().code, 'ITEM_QUOTA_EXCEEDED')
  await api.call('deleteItem', { token: accessToken, params: { itemId: owned.id } })
  const retried = await api.call('createItem', { token: accessToken, body: { name: 'over the quota' }, headers })
  t.same([retried.statusCode, retried.headers['idempotent-replayed']], [201, undefined], 'created now')
})

t.test('a create refused by its rate limit frees its key, for a retry once the window allows', async (t) => {
  const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '1' })
  const { accessToken } = await api.register()
  await api.createItem(accessToken)
  const headers = { 'idempotency-key': randomUUID() }
  for (const attempt of [1, 2]) {
    const limited = await api.call('createItem', { token: accessToken, body: { name: 'n' }, headers })
    t.same([limited.statusCode, limited.json().code], [429, 'RATE_LIMITED'], `attempt ${attempt}: limited, not told the key runs`)
  }
})

t.test('Idempotency-Key is 1 to 255 characters; a viewer and an anonymous caller are refused before it is looked at', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const viewer = await api.register({ role: 'viewer' })
  const create = async (key: string, token?: string) => await api.call('createItem', { ...(token === undefined ? {} : { token }), body: { name: 'n' }, headers: { 'idempotency-key': key } })
  t.equal((await create('k'.repeat(255), accessToken)).statusCode, 201)
  for (const key of ['', 'k'.repeat(256)]) {
    const invalid = await create(key, accessToken)
    t.equal(invalid.statusCode, 400)
    t.match(invalid.json().details, [{ field: 'headers.idempotency-key' }])
  }
  t.equal((await create('x', viewer.accessToken)).json().code, 'FORBIDDEN')
  t.equal((await create('x')).json().code, 'AUTHENTICATION_REQUIRED')
  t.equal((await create('x', accessToken)).statusCode, 201, 'neither took the key')
})

t.test('each user keeps MAX_IDEMPOTENCY_KEYS_PER_USER keys, the oldest out first', async (t) => {
  const api = await build(t, { MAX_IDEMPOTENCY_KEYS_PER_USER: '2' })
  const { accessToken } = await api.register()
  const create = async (key: string) => await api.call('createItem', { token: accessToken, body: { name: 'n' }, headers: { 'idempotency-key': key } })
  for (const key of ['a', 'b', 'c']) t.equal((await create(key)).headers['idempotent-replayed'], undefined, key)
  t.equal((await create('c')).headers['idempotent-replayed'], 'true', 'the newest is kept')
  t.equal((await create('b')).headers['idempotent-replayed'], 'true')
  t.equal((await create('a')).headers['idempotent-replayed'], undefined, 'the oldest was pushed out: created again')
})

t.test('a key is forgotten IDEMPOTENCY_KEY_TTL_SECONDS after its create', async (t) => {
  const api = await build(t, { IDEMPOTENCY_KEY_TTL_SECONDS: '1' })
  const { accessToken } = await api.register()
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'n' }, headers: { 'idempotency-key': 'k' } })
  const expired = Date.now() + 1100
  t.equal((await create()).statusCode, 201)
  await sleep(expired - Date.now())
  t.same([(await create()).statusCode, (await create()).headers['idempotent-replayed']], [201, 'true'], 'created again, and kept again')
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 2)
})

t.test('accounts that fill their quotas with keys forget no one else\'s: a victim\'s retry is replayed, and its next create with a key is 201', async (t) => {
  // The attack, scaled down: accounts with the longest keys and long bodies fill their quotas of 16 KiB while the
  // victim's create waits for its retry.
  const store = createMemoryStore({ accounts: { accounts: Infinity, quotaBytes: 16 * 1024 } })
  const api = await build(t, {}, { store })
  const victim = await api.register()
  const create = async (token: string, key: string, description: string | null = null) =>
    await api.call('createItem', { token, body: { name: 'n', description }, headers: { 'idempotency-key': key } })
  t.equal((await create(victim.accessToken, 'my-create')).statusCode, 201)
  const statuses = new Set<number>()
  const crowd = [...Array<number>(8).keys()]
  for (const [account, { accessToken }] of (await Promise.all(crowd.map(async () => await api.register()))).entries()) {
    for (let index = 0; index < 40; index += 1) statuses.add((await create(accessToken, `${account}-${index}-`.padEnd(255, 'k'), 'd'.repeat(2_000))).statusCode)
  }
  t.same([...statuses].sort(), [201, 403], 'the crowd used up what it may take, then was refused')
  const retry = await create(victim.accessToken, 'my-create')
  t.same([retry.statusCode, retry.headers['idempotent-replayed']], [201, 'true'], 'answered from the store, not created again')
  t.equal((await api.call('listItems', { token: victim.accessToken, query: { contributorId: victim.user.id } })).json().pagination.total, 1)
  t.equal((await create(victim.accessToken, 'my-next-create')).statusCode, 201, 'within its quota, the victim is never refused')
})

t.test('a replay is made from the contract\'s success response: an operation whose required fields nothing makes, or whose success has no body, stops the start', async (t) => {
  const { routes } = await import('../../generated/routes.js')
  const { idempotency } = await import('../../src/pipeline/idempotency.js')
  const { ITEM_FIELDS } = await import('../../src/handlers/item-fields.js')
  const createItem = routes.find((route) => route.operationId === 'createItem')!
  const checkLiveness = routes.find((route) => route.operationId === 'checkLiveness')!
  const stepOf = (fields: Parameters<typeof idempotency>[0]['fields']) => idempotency({ fields }).claim
  t.ok(stepOf(ITEM_FIELDS)(createItem), 'the create\'s 201: its Location and ETag are made from the item')
  t.equal(stepOf(ITEM_FIELDS)({ ...createItem, idempotent: false }), undefined, 'an operation without the header runs none of it')
  t.throws(() => stepOf({ etag: ITEM_FIELDS.etag! })(createItem),
    { message: 'createItem: a replay needs a success status with a body (201) whose required fields are each made from the item (none makes: location)' })
  t.throws(() => stepOf(ITEM_FIELDS)({ ...createItem, statuses: ['400', '409'] }), { message: /\(none\)/ }, 'no success status')
  t.ok(stepOf({})({ ...checkLiveness, idempotent: true }), 'a success that requires no field needs none made')
})
