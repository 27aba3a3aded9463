import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import type { DomainEvent } from '../../src/plugins/app/events.js'
import type { RouteOperationId } from '../../generated/routes.js'
import { type Api, rateLimitItems, type Schemas } from '../support/api.js'
import { build } from '../support/app.js'

const MISSING_ID = '00000000-0000-4000-8000-000000000000'

interface Cast {
  api: Api
  owner: Schemas['AuthResponse']
  other: Schemas['AuthResponse']
  viewer: Schemas['AuthResponse']
}

async function cast (t: Test): Promise<Cast> {
  const api = await build(t)
  return { api, owner: await api.register(), other: await api.register(), viewer: await api.register({ role: 'viewer' }) }
}

t.test('createItem', async (t) => {
  t.test('adds an active item owned by the caller, with a null description when none is given', async (t) => {
    const { api, owner } = await cast(t)
    const response = await api.call('createItem', { token: owner.accessToken, body: { name: 'Difference engine' } })
    t.equal(response.statusCode, 201)
    const item = response.json()
    t.match(item, { name: 'Difference engine', description: null, status: 'active', contributorId: owner.user.id })
    t.equal(item.createdAt, item.updatedAt)
    t.equal(response.headers.location, `/v1/items/${item.id}`)
    t.same((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).json(), item)
  })

  t.test('keeps a given description', async (t) => {
    const { api, owner } = await cast(t)
    const item = await api.createItem(owner.accessToken, { name: 'n', description: 'A longer text' })
    t.equal(item.description, 'A longer text')
  })

  t.test('fields the server owns are not client-writable', async (t) => {
    const { api, owner } = await cast(t)
    for (const field of ['id', 'contributorId', 'status', 'createdAt', 'updatedAt']) {
      const response = await api.call('createItem', { token: owner.accessToken, body: { name: 'n', [field]: 'x' } })
      t.equal(response.statusCode, 400, field)
      t.same(response.json().details, [{ field: `body.${field}`, issue: 'is not an allowed field' }])
    }
  })

  t.test('limits from the contract apply: name 1 to 200 characters, description up to 10 000', async (t) => {
    const { api, owner } = await cast(t)
    const create = async (body: object) => (await api.call('createItem', { token: owner.accessToken, body })).statusCode
    t.equal(await create({ name: 'x'.repeat(200), description: 'd'.repeat(10000) }), 201)
    t.equal(await create({ name: 'x'.repeat(201) }), 400)
    t.equal(await create({ name: 'x', description: 'd'.repeat(10001) }), 400)
    t.equal(await create({ name: '😀'.repeat(200) }), 201, 'lengths count characters, not UTF-16 units')
  })

  t.test('a viewer is FORBIDDEN, before its body is even validated', async (t) => {
    const { api, viewer } = await cast(t)
    for (const body of [{ name: 'n' }, { nonsense: true }]) {
      const response = await api.call('createItem', { token: viewer.accessToken, body })
      t.equal(response.statusCode, 403)
      t.equal(response.json().code, 'FORBIDDEN')
    }
  })

  t.test('fifty concurrent creates give fifty distinct items', async (t) => {
    const { api, owner } = await cast(t)
    const responses = await Promise.all(Array.from({ length: 50 }, async (_, index) =>
      await api.call('createItem', { token: owner.accessToken, body: { name: `item ${index}` } })))
    t.ok(responses.every((response) => response.statusCode === 201))
    t.equal(new Set(responses.map((response) => response.json().id)).size, 50)
    t.equal((await api.call('listItems', { token: owner.accessToken })).json().pagination.total, 50)
  })
})

t.test('getItem', async (t) => {
  const { api, owner, other, viewer } = await cast(t)
  const item = await api.createItem(owner.accessToken)
  for (const [who, caller] of Object.entries({ owner, other, viewer })) {
    t.test(`the ${who} can read any item`, async (t) => {
      const response = await api.call('getItem', { token: caller.accessToken, params: { itemId: item.id } })
      t.equal(response.statusCode, 200)
      t.same(response.json(), item)
    })
  }
  t.test('a non-uuid id is a 400 and no token is a 401', async (t) => {
    t.equal((await api.call('getItem', { token: viewer.accessToken, params: { itemId: 'item-1' } })).statusCode, 400)
    t.equal((await api.call('getItem', { params: { itemId: item.id } })).statusCode, 401)
  })
  t.test('a missing item is NOT_FOUND', async (t) => {
    const response = await api.call('getItem', { token: viewer.accessToken, params: { itemId: MISSING_ID } })
    t.equal(response.statusCode, 404)
    t.same(response.json(), { code: 'NOT_FOUND', message: 'Item not found.' })
  })
})

t.test('updateItem', async (t) => {
  t.test('changes only the given fields and moves updatedAt strictly forward', async (t) => {
    const { api, owner } = await cast(t)
    const item = await api.createItem(owner.accessToken, { name: 'before', description: 'kept' })
    const response = await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: 'after' } })
    t.equal(response.statusCode, 200)
    const updated = response.json()
    t.same({ ...updated, updatedAt: item.updatedAt }, { ...item, name: 'after' })
    t.ok(updated.updatedAt > item.updatedAt)
    const cleared = await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { description: null } })
    t.equal(cleared.json().description, null)
    t.equal(cleared.json().name, 'after')
  })

  // Whether two real requests share a millisecond depends on the machine's speed, so the clock stands still here.
  t.test('moves updatedAt strictly forward even for edits within one millisecond', async (t) => {
    const { api, owner } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    const now = Date.now()
    t.intercept(Date, 'now', { value: () => now })
    const edit = async (name: string): Promise<Schemas['Item']> =>
      (await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name } })).json()
    const first = await edit('first')
    const second = await edit('second')
    t.ok(first.updatedAt > item.updatedAt)
    t.equal(Date.parse(second.updatedAt), Date.parse(first.updatedAt) + 1, 'one millisecond after the edit before it')
  })

  t.test('toggles active ↔ archived any number of times, createdAt never changes', async (t) => {
    const { api, owner } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    let previous = item
    for (const status of ['archived', 'active', 'archived', 'active', 'archived'] as const) {
      const response = await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { status } })
      t.equal(response.statusCode, 200)
      const updated = response.json()
      t.equal(updated.status, status)
      t.equal(updated.createdAt, item.createdAt)
      t.ok(updated.updatedAt > previous.updatedAt, 'updatedAt strictly increases')
      previous = updated
    }
  })

  t.test('follows the precedence 401 → 403 role → 400 → 404 → 403 owner', async (t) => {
    const { api, owner, other, viewer } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    const patch = async (token: string | undefined, itemId: string, body: object) =>
      await api.call('updateItem', { ...(token === undefined ? {} : { token }), params: { itemId }, body })
    t.equal((await patch(undefined, 'bad', {})).statusCode, 401)
    t.equal((await patch(viewer.accessToken, 'bad', {})).statusCode, 403)
    t.equal((await patch(other.accessToken, 'bad', { name: 'x' })).statusCode, 400)
    t.equal((await patch(other.accessToken, MISSING_ID, {})).statusCode, 400)
    t.equal((await patch(other.accessToken, MISSING_ID, { name: 'x' })).statusCode, 404)
    const notOwner = await patch(other.accessToken, item.id, { name: 'x' })
    t.equal(notOwner.statusCode, 403)
    t.same(notOwner.json(), { code: 'FORBIDDEN', message: 'Only the item\'s contributor may change it.' })
    t.same((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).json(), item, 'nothing changed')
  })

  t.test('a failed edit changes nothing', async (t) => {
    const { api, owner } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    const response = await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: 'ok', status: 'deleted' } })
    t.equal(response.statusCode, 400)
    t.same((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).json(), item)
  })
})

t.test('deleteItem', async (t) => {
  t.test('removes the item for everyone; a second delete is NOT_FOUND', async (t) => {
    const { api, owner, viewer } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    const response = await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })
    t.equal(response.statusCode, 204)
    t.equal(response.body, '')
    t.equal((await api.call('getItem', { token: viewer.accessToken, params: { itemId: item.id } })).statusCode, 404)
    t.equal((await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })).statusCode, 404)
    t.equal((await api.call('listItems', { token: viewer.accessToken })).json().pagination.total, 0)
  })

  t.test('a non-uuid id is a 400 and no token is a 401', async (t) => {
    const { api, owner } = await cast(t)
    t.equal((await api.call('deleteItem', { token: owner.accessToken, params: { itemId: 'item-1' } })).statusCode, 400)
    t.equal((await api.call('deleteItem', { params: { itemId: MISSING_ID } })).statusCode, 401)
  })

  t.test('only the owning contributor may delete', async (t) => {
    const { api, owner, other, viewer } = await cast(t)
    const item = await api.createItem(owner.accessToken)
    for (const caller of [other, viewer]) {
      const response = await api.call('deleteItem', { token: caller.accessToken, params: { itemId: item.id } })
      t.equal(response.statusCode, 403)
      t.equal(response.json().code, 'FORBIDDEN')
    }
    t.equal((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).statusCode, 200)
    t.equal((await api.call('deleteItem', { token: viewer.accessToken, params: { itemId: MISSING_ID } })).statusCode, 403, 'role before existence')
    t.equal((await api.call('deleteItem', { token: other.accessToken, params: { itemId: MISSING_ID } })).statusCode, 404)
  })

  t.test('deleting from the middle keeps the order of the rest', async (t) => {
    const { api, owner } = await cast(t)
    const items = []
    for (let index = 0; index < 5; index += 1) items.push(await api.createItem(owner.accessToken, { name: `n${index}` }))
    for (const index of [2, 0, 4]) await api.call('deleteItem', { token: owner.accessToken, params: { itemId: items[index]?.id ?? '' } })
    const page = (await api.call('listItems', { token: owner.accessToken })).json()
    t.same(page.data.map((item: Schemas['Item']) => item.name), ['n1', 'n3'])
  })
})

t.test('listItems', async (t) => {
  const { api, owner, viewer } = await cast(t)
  const created: Schemas['Item'][] = []
  for (let index = 0; index < 45; index += 1) created.push(await api.createItem(owner.accessToken, { name: `item ${index}` }))

  t.test('defaults to page 1 of 20, oldest first', async (t) => {
    const response = await api.call('listItems', { token: viewer.accessToken })
    t.equal(response.statusCode, 200)
    const page = response.json()
    t.same(page.pagination, { page: 1, pageSize: 20, total: 45 })
    t.same(page.data, created.slice(0, 20))
  })

  t.test('the last page is partial and a page past the end is empty with the true total', async (t) => {
    t.same((await api.call('listItems', { token: viewer.accessToken, query: { page: 3 } })).json(),
      { data: created.slice(40), pagination: { page: 3, pageSize: 20, total: 45 } })
    t.same((await api.call('listItems', { token: viewer.accessToken, query: { page: 99, pageSize: 100 } })).json(),
      { data: [], pagination: { page: 99, pageSize: 100, total: 45 } })
  })

  t.test('walking every page yields each item once', async (t) => {
    const seen = new Set<string>()
    for (let page = 1; page <= 7; page += 1) {
      const { data } = (await api.call('listItems', { token: viewer.accessToken, query: { page, pageSize: 7 } })).json()
      for (const item of data) seen.add(item.id)
    }
    t.equal(seen.size, 45)
  })

  t.test('bounds: page ≥ 1, 1 ≤ pageSize ≤ 100, integers only', async (t) => {
    const statusFor = async (query: Record<string, string | number>) =>
      (await api.call('listItems', { token: viewer.accessToken, query })).statusCode
    t.equal(await statusFor({ pageSize: 1 }), 200)
    t.equal(await statusFor({ pageSize: 100 }), 200)
    const invalid: Array<Record<string, string | number>> = [{ page: 0 }, { page: -1 }, { page: 1.5 }, { page: 'two' }, { pageSize: 0 }, { pageSize: 101 }, { pageSize: '' }]
    for (const query of invalid) {
      t.equal(await statusFor(query), 400, JSON.stringify(query))
    }
  })

  t.test('needs a token', async (t) => {
    t.equal((await api.call('listItems')).statusCode, 401)
  })
})

t.test('listItems filtered by status and contributor, alone or together: creation order, totals of the filtered set', async (t) => {
  const { api, owner, viewer } = await cast(t)
  const other = await api.register()
  const created: Schemas['Item'][] = []
  for (let index = 0; index < 12; index += 1) {
    const author = index % 3 === 0 ? other : owner
    const item = await api.createItem(author.accessToken, { name: `item ${index}` })
    created.push(index % 4 === 0 ? (await api.call('updateItem', { token: author.accessToken, params: { itemId: item.id }, body: { status: 'archived' } })).json() : item)
  }
  const list = async (query: { status?: Schemas['ItemStatus'], contributorId?: string, page?: number, pageSize?: number }): Promise<Schemas['ItemList']> =>
    (await api.call('listItems', { token: viewer.accessToken, query })).json()
  const ownerId = owner.user.id
  for (const [query, kept] of [
    [{ status: 'archived' }, (item: Schemas['Item']) => item.status === 'archived'],
    [{ status: 'active' }, (item: Schemas['Item']) => item.status === 'active'],
    [{ contributorId: ownerId }, (item: Schemas['Item']) => item.contributorId === ownerId],
    [{ contributorId: ownerId, status: 'active' }, (item: Schemas['Item']) => item.contributorId === ownerId && item.status === 'active']
  ] as const) {
    const expected = created.filter(kept)
    t.same(await list({ ...query, pageSize: 100 }), { data: expected, pagination: { page: 1, pageSize: 100, total: expected.length } }, JSON.stringify(query))
  }
  const ownersActive = created.filter((item) => item.contributorId === ownerId && item.status === 'active')
  t.same((await list({ contributorId: ownerId, status: 'active', page: 2, pageSize: 2 })).data, ownersActive.slice(2, 4), 'paged like the catalogue')
  t.same(await list({ contributorId: viewer.user.id }), { data: [], pagination: { page: 1, pageSize: 20, total: 0 } }, 'a user with no items')
  const invalid: Array<Record<string, string>> = [{ status: 'deleted' }, { contributorId: 'not-a-uuid' }, { status: '' }]
  for (const query of invalid) {
    const response = await api.call('listItems', { token: viewer.accessToken, query })
    t.equal(response.statusCode, 400, JSON.stringify(query))
    t.equal(response.json().code, 'VALIDATION_ERROR')
  }
})

t.test('events', async (t) => {
  t.test('each successful mutation emits exactly one CloudEvent, after the response, and failures emit none', async (t) => {
    const seen: Array<DomainEvent<'items.item.added' | 'items.item.edited' | 'items.item.removed'>> = []
    const record = (event: (typeof seen)[number]): void => { seen.push(event) }
    const api = await build(t, {}, {
      subscribers: { 'items.item.added': [record], 'items.item.edited': [record], 'items.item.removed': [record] }
    })
    const owner = await api.register()
    const other = await api.register()
    const settle = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

    const item = await api.createItem(owner.accessToken, { name: 'evented' })
    await settle()
    const edited = (await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { status: 'archived' } })).json()
    await settle()
    await api.call('updateItem', { token: other.accessToken, params: { itemId: item.id }, body: { name: 'x' } })
    await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: '' } })
    await api.call('createItem', { token: owner.accessToken, body: {} })
    await api.call('deleteItem', { token: other.accessToken, params: { itemId: item.id } })
    await api.call('deleteItem', { token: owner.accessToken, params: { itemId: MISSING_ID } })
    await settle()
    t.equal(seen.length, 2, 'failed requests emit nothing')
    await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })
    await settle()

    t.same(seen.map((event) => event.type), ['items.item.added', 'items.item.edited', 'items.item.removed'])
    t.same(seen.map((event) => event.data.item), [item, edited, edited])
    for (const event of seen) {
      t.match(event, {
        specversion: '1.0',
        id: /^[0-9a-f-]{36}$/,
        source: '/v1/items',
        time: String,
        subject: item.id,
        datacontenttype: 'application/json',
        data: { actorId: owner.user.id }
      })
    }
    t.equal(new Set(seen.map((event) => event.id)).size, 3, 'event ids are unique')
  })

  t.test('a handler that throws or rejects is logged and changes neither the response nor the other handlers', async (t) => {
    const delivered: string[] = []
    const api = await build(t, {}, {
      subscribers: {
        'items.item.added': [
          () => { throw new Error('sync failure') },
          async () => { throw new Error('async failure') },
          (event) => { delivered.push(event.subject) }
        ]
      }
    })
    const owner = await api.register()
    const response = await api.call('createItem', { token: owner.accessToken, body: { name: 'n' } })
    t.equal(response.statusCode, 201)
    await new Promise((resolve) => setImmediate(resolve))
    t.same(delivered, [response.json().id])
  })

  t.test('on and off subscribe at run time, and pending handlers finish before close resolves', async (t) => {
    const api = await build(t)
    const owner = await api.register()
    let finished = 0
    const slow = async (): Promise<void> => { await sleep(50); finished += 1 }
    api.app.events.on('items.item.added', slow)
    await api.createItem(owner.accessToken)
    api.app.events.off('items.item.added', slow)
    await api.createItem(owner.accessToken)
    await api.app.close()
    t.equal(finished, 1)
  })
})

t.test('the spec\'s permission matrix, row by row', async (t) => {
  const { api, owner, other, viewer } = await cast(t)
  const callers = { 'owning contributor': owner, 'other contributor': other, viewer }
  // Section 5 of the spec: who may do what to an existing item, and what a missing item gives each caller.
  const matrix: Array<[RouteOperationId, Record<keyof typeof callers, number>, Record<keyof typeof callers, number>]> = [
    ['listItems', { 'owning contributor': 200, 'other contributor': 200, viewer: 200 }, { 'owning contributor': 200, 'other contributor': 200, viewer: 200 }],
    ['getItem', { 'owning contributor': 200, 'other contributor': 200, viewer: 200 }, { 'owning contributor': 404, 'other contributor': 404, viewer: 404 }],
    ['updateItem', { 'owning contributor': 200, 'other contributor': 403, viewer: 403 }, { 'owning contributor': 404, 'other contributor': 404, viewer: 403 }],
    ['deleteItem', { 'owning contributor': 204, 'other contributor': 403, viewer: 403 }, { 'owning contributor': 404, 'other contributor': 404, viewer: 403 }],
    ['logoutUser', { 'owning contributor': 204, 'other contributor': 204, viewer: 204 }, { 'owning contributor': 204, 'other contributor': 204, viewer: 204 }]
  ]
  for (const [operationId, existing, missing] of matrix) {
    for (const [who, caller] of Object.entries(callers) as Array<[keyof typeof callers, Schemas['AuthResponse']]>) {
      for (const [which, expected] of [['an existing item', existing[who]], ['a missing item', missing[who]]] as const) {
        const item = await api.createItem(owner.accessToken)
        // Each caller signs in afresh, so that logging out in one row does not end its session for the next.
        const { accessToken } = (await api.call('loginUser', { body: { email: caller.user.email, password: 'correct horse battery staple' } })).json()
        const itemId = which === 'an existing item' ? item.id : MISSING_ID
        const body = operationId === 'updateItem' ? { status: 'archived' } : undefined
        const response = await api.call(operationId, { token: accessToken, params: { itemId }, ...(body === undefined ? {} : { body }) })
        t.equal(response.statusCode, expected, `${operationId} by the ${who} on ${which}`)
      }
    }
  }
  t.equal((await api.call('createItem', { token: owner.accessToken, body: { name: 'n' } })).statusCode, 201, 'createItem by a contributor')
  t.equal((await api.call('createItem', { token: viewer.accessToken, body: { name: 'n' } })).statusCode, 403, 'createItem by a viewer')
})

t.test('item writes are bounded per user', async (t) => {
  t.test('creates, edits and deletes share one limit per user, answered 429 with Retry-After', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '4' })
    const { accessToken } = await api.register()
    const item = await api.createItem(accessToken)
    t.equal((await api.call('updateItem', { token: accessToken, params: { itemId: item.id }, body: { name: 'b' } })).statusCode, 200)
    const removed = await api.createItem(accessToken)
    t.equal((await api.call('deleteItem', { token: accessToken, params: { itemId: removed.id } })).statusCode, 204)
    for (const [operationId, options] of [
      ['createItem', { body: { name: 'c' } }],
      ['updateItem', { params: { itemId: item.id }, body: { name: 'c' } }],
      ['deleteItem', { params: { itemId: item.id } }]
    ] as const) {
      const limited = await api.call(operationId, { token: accessToken, ...options })
      t.equal(limited.statusCode, 429, operationId)
      t.same(limited.json(), { code: 'RATE_LIMITED', message: 'Too many item writes (creates, edits and deletes together); try again later.' })
      t.match(limited.headers['retry-after'], /^\d+$/)
    }
    const other = await api.register()
    t.equal((await api.call('createItem', { token: other.accessToken, body: { name: 'd' } })).statusCode, 201, 'another user is not limited')
  })

  t.test('every write names the limit (RateLimit-Policy) and, once it counted, what is left of it (RateLimit); reads name none', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '3', RATE_LIMIT_WINDOW_SECONDS: '60' })
    const { accessToken } = await api.register()
    const policy = { 'item-writes': { q: 3, w: 60 } }
    const created = await api.call('createItem', { token: accessToken, body: { name: 'a' } })
    t.same(rateLimitItems(created.headers['ratelimit-policy']), policy)
    t.match(rateLimitItems(created.headers.ratelimit), { 'item-writes': { r: 2, t: Number } })
    const edited = await api.call('updateItem', { token: accessToken, params: { itemId: created.json().id }, body: { name: 'b' } })
    t.match(rateLimitItems(edited.headers.ratelimit), { 'item-writes': { r: 1 } }, 'an edit counts on the same limit')
    for (const [what, response] of [
      ['a body the contract refuses', await api.call('createItem', { token: accessToken, body: { name: '' } })],
      ['no token', await api.call('createItem', { body: { name: 'c' } })]
    ] as const) {
      t.same(rateLimitItems(response.headers['ratelimit-policy']), policy, `${what}: the limit is named`)
      t.equal(response.headers.ratelimit, undefined, `${what}: answered before it counted`)
    }
    const listed = await api.call('listItems', { token: accessToken })
    t.same([listed.headers['ratelimit-policy'], listed.headers.ratelimit], [undefined, undefined], 'a read is not limited')
  })

  t.test('a write counts against the limit only once nothing but the store\'s room refuses it: not for its item, its owner or its If-Match; past it, 429 and nothing written', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '2', RATE_LIMIT_WINDOW_SECONDS: '60' })
    const [owner, other] = [await api.register(), await api.register()]
    const created = await api.call('createItem', { token: owner.accessToken, body: { name: 'a' } })
    t.match(rateLimitItems(created.headers.ratelimit), { 'item-writes': { r: 1 } })
    const itemId = created.json().id
    for (const [what, response, status] of [
      ['no such item', await api.call('updateItem', { token: owner.accessToken, params: { itemId: MISSING_ID }, body: { name: 'b' } }), 404],
      ['another\'s edit', await api.call('updateItem', { token: other.accessToken, params: { itemId }, body: { name: 'b' } }), 403],
      ['another\'s delete', await api.call('deleteItem', { token: other.accessToken, params: { itemId } }), 403],
      ['a stale If-Match', await api.call('updateItem', { token: owner.accessToken, params: { itemId }, headers: { 'if-match': '"stale"' }, body: { name: 'b' } }), 412],
      ['a delete of no such item', await api.call('deleteItem', { token: owner.accessToken, params: { itemId: MISSING_ID } }), 404]
    ] as const) {
      t.equal(response.statusCode, status, what)
      t.equal(response.headers.ratelimit, undefined, `${what}: counted nothing`)
    }
    const edited = await api.call('updateItem', { token: owner.accessToken, params: { itemId }, body: { name: 'b' } })
    t.match(rateLimitItems(edited.headers.ratelimit), { 'item-writes': { r: 0 } }, 'the second write counted is the edit')
    const refused = await api.call('createItem', { token: owner.accessToken, body: { name: 'c' } })
    t.same([refused.statusCode, refused.json().code], [429, 'RATE_LIMITED'])
    t.match(rateLimitItems(refused.headers.ratelimit), { 'item-writes': { r: 0, t: Number(refused.headers['retry-after']) } }, 'saying when it ends')
    const deleted = await api.call('deleteItem', { token: owner.accessToken, params: { itemId } })
    t.equal(deleted.statusCode, 429, 'a delete counts too')
    const listed = await api.call('listItems', { token: owner.accessToken })
    t.same(listed.json().data.map((item: { name: string }) => item.name), ['b'], 'nothing written past the limit')
    t.match(rateLimitItems((await api.call('createItem', { token: other.accessToken, body: { name: 'd' } })).headers.ratelimit), { 'item-writes': { r: 1 } }, 'each user has a limit of their own')
  })

  t.test('a contributor owns at most MAX_ITEMS_PER_USER items; a delete makes room', async (t) => {
    const api = await build(t, { MAX_ITEMS_PER_USER: '2' })
    const { accessToken } = await api.register()
    await api.createItem(accessToken)
    const second = await api.createItem(accessToken)
    const refused = await api.call('createItem', { token: accessToken, body: { name: 'third' } })
    t.equal(refused.statusCode, 403)
    t.equal(refused.json().code, 'ITEM_QUOTA_EXCEEDED')
    t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 2, 'nothing was added')
    await api.call('deleteItem', { token: accessToken, params: { itemId: second.id } })
    t.equal((await api.call('createItem', { token: accessToken, body: { name: 'third' } })).statusCode, 201)
  })
})

t.test('conditional requests', async (t) => {
  t.test('every item response carries a strong ETag that changes with every edit; If-None-Match on get answers 304 while it matches', async (t) => {
    const { api, owner } = await cast(t)
    const created = await api.call('createItem', { token: owner.accessToken, body: { name: 'tagged' } })
    const item = created.json()
    const tag = created.headers.etag
    t.match(tag, /^"[^"]+"$/, 'a strong entity tag')
    const get = async (ifNoneMatch?: string): Promise<{ statusCode: number, etag: unknown, body: string }> => {
      const response = await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id }, headers: ifNoneMatch === undefined ? {} : { 'if-none-match': ifNoneMatch } })
      return { statusCode: response.statusCode, etag: response.headers.etag, body: response.body }
    }
    t.same(await get(), { statusCode: 200, etag: tag, body: JSON.stringify(item) })
    t.same(await get(String(tag)), { statusCode: 304, etag: tag, body: '' }, 'unchanged: 304, no body')
    t.equal((await get(`"other", W/${String(tag)}`)).statusCode, 304, 'a weak tag in a list matches (weak comparison)')
    t.equal((await get('*')).statusCode, 304)
    t.equal((await get('"stale"')).statusCode, 200)

    const edited = await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: 'renamed' } })
    t.not(edited.headers.etag, tag, 'an edit changes the tag')
    t.same(await get(String(tag)), { statusCode: 200, etag: edited.headers.etag, body: edited.body }, 'the old tag no longer matches')
  })

  t.test('If-Match on edit and delete: applied while it matches, otherwise 412 PRECONDITION_FAILED and nothing changes', async (t) => {
    const { api, owner, other } = await cast(t)
    const created = await api.call('createItem', { token: owner.accessToken, body: { name: 'contended' } })
    const item = created.json()
    const tag = String(created.headers.etag)
    const edit = async (ifMatch: string, token = owner.accessToken) =>
      await api.call('updateItem', { token, params: { itemId: item.id }, headers: { 'if-match': ifMatch }, body: { name: 'changed' } })

    const first = await edit(tag)
    t.equal(first.statusCode, 200, 'the client that read the item last wins')
    const second = await edit(tag)
    t.equal(second.statusCode, 412, 'the other, still holding the old tag, is refused')
    t.same(second.json(), { code: 'PRECONDITION_FAILED', message: 'The item has changed since you read it; read it again and retry.' })
    t.equal((await edit(`W/${String(first.headers.etag)}`)).statusCode, 412, 'a weak tag never matches strongly')
    t.same((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).json(), first.json(), 'the refused edits changed nothing')
    t.equal((await edit(`"x", ${String(first.headers.etag)}`)).statusCode, 200, 'any tag of a list')
    t.equal((await edit('*')).statusCode, 200, '* matches the item as it is')

    t.equal((await edit('"stale"', other.accessToken)).statusCode, 403, 'ownership is checked before the precondition')
    const remove = async (ifMatch: string, itemId = item.id) =>
      await api.call('deleteItem', { token: owner.accessToken, params: { itemId }, headers: { 'if-match': ifMatch } })
    t.equal((await remove('"stale"', MISSING_ID)).statusCode, 404, 'a missing item is a 404 first')
    const refused = await remove(tag)
    t.equal(refused.statusCode, 412)
    t.equal(refused.json().code, 'PRECONDITION_FAILED')
    const current = await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })
    t.equal(current.statusCode, 200, 'still there')
    t.equal((await remove(String(current.headers.etag))).statusCode, 204)
  })
})

t.test('one uuid, however written: an id in upper case or as a urn:uuid: names the same item and contributor', async (t) => {
  const { api, owner } = await cast(t)
  const item = await api.createItem(owner.accessToken)
  const spellings = [item.id.toUpperCase(), `urn:uuid:${item.id}`, `URN:UUID:${item.id.toUpperCase()}`]
  let current = item
  for (const itemId of spellings) {
    const read = await api.call('getItem', { token: owner.accessToken, params: { itemId } })
    t.same([read.statusCode, read.json()], [200, current], `getItem ${itemId}`)
    const edited = await api.call('updateItem', { token: owner.accessToken, params: { itemId }, body: { name: itemId } })
    current = edited.json()
    t.same([edited.statusCode, current.id, current.name], [200, item.id, itemId], `updateItem ${itemId}`)
    const listed = (await api.call('listItems', { token: owner.accessToken, query: { contributorId: owner.user.id.toUpperCase() } })).json()
    t.same(listed.data.map((listedItem: { id: string }) => listedItem.id), [item.id], 'listItems by an upper-case contributorId')
  }
  const urnContributor = (await api.call('listItems', { token: owner.accessToken, query: { contributorId: `urn:uuid:${owner.user.id}` } })).json()
  t.equal(urnContributor.pagination.total, 1, 'and by its urn')
  t.equal((await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id.toUpperCase() } })).statusCode, 204)
  t.equal((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).statusCode, 404, 'the very item was removed')
})
