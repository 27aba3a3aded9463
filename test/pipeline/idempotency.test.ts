import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { DomainEvent } from '../../src/plugins/app/events.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import type { ItemStore, Store } from '../../src/store/store.js'
import { rateLimitItems } from '../support/api.js'
import { build } from '../support/app.js'

const settle = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

interface HeldStore {
  store: Store
  /** Resolves once `count` creates are held in the store. */
  held: (count: number) => Promise<void>
  /** Lets the create held `index`-th go on. */
  release: (index: number) => void
}

/** The memory store, with every item add held until the test lets it go on: a create then runs for as long as the test needs. */
function heldStore (): HeldStore {
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
  return {
    store: { ...store, items },
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

t.test('a retry sent while its first request runs: the first to be stored makes the item, the other is answered with it, replayed; one event', async (t) => {
  const added: Array<DomainEvent<'items.item.added'>> = []
  const { store, held, release } = heldStore()
  const api = await build(t, {}, { store, subscribers: { 'items.item.added': [(event) => { added.push(event) }] } })
  const { accessToken } = await api.register()
  const create = async () => await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers: { 'idempotency-key': 'k' } })
  const first = create()
  await held(1)
  const retry = create()
  await held(2)
  release(1)
  const stored = await retry
  t.same([stored.statusCode, stored.headers['idempotent-replayed']], [201, undefined], 'the retry, stored first, made it')
  release(0)
  const answered = await first
  t.same([answered.statusCode, answered.headers['idempotent-replayed'], answered.json(), answered.headers.location], [201, 'true', stored.json(), stored.headers.location],
    'the first, stored second, is answered with it')
  const another = api.call('createItem', { token: accessToken, body: { name: 'another' }, headers: { 'idempotency-key': 'k' } })
  await held(3)
  release(2)
  const other = await another
  t.same([other.statusCode, other.json().code], [422, 'IDEMPOTENCY_KEY_REUSED'], 'another body under the key')
  await settle()
  t.equal(added.length, 1, 'one event')
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1, 'one item')
})

t.test('twenty parallel creates with one key make one item: every answer is 201 with it, all but one replayed', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const headers = { 'idempotency-key': randomUUID() }
  const responses = await Promise.all(Array.from({ length: 20 }, async () =>
    await api.call('createItem', { token: accessToken, body: { name: 'once' }, headers })))
  t.same(new Set(responses.map((response) => response.statusCode)), new Set([201]))
  t.equal(new Set(responses.map((response) => response.json().id)).size, 1)
  t.equal(responses.filter((response) => response.headers['idempotent-replayed'] === undefined).length, 1, 'one made it')
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1)
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

t.test('a create refused by its rate limit records nothing under its key', async (t) => {
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
  t.equal((await create()).statusCode, 201)
  // Past the record's time to live, which began before the answer came.
  await sleep(1100)
  // That the key is kept again is asserted on a sandbox's clock (sandboxes.test.ts), with no second to beat.
  const again = await create()
  t.same([again.statusCode, again.headers['idempotent-replayed']], [201, undefined], 'created again')
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

t.test('an operation that does not declare the Idempotency-Key header runs none of the step', async (t) => {
  const { routes } = await import('../../generated/routes.js')
  const { idempotency } = await import('../../src/pipeline/idempotency.js')
  const createItem = routes.find((route) => route.operationId === 'createItem')!
  t.ok(idempotency(createItem), 'the create declares it')
  t.equal(idempotency({ ...createItem, idempotent: false }), undefined)
})
