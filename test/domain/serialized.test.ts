// Items are serialized once, when written, and every read sends the text kept (src/domain/serialized.ts): each answer that
// carries items is, byte for byte, what the contract's serializer makes of the value it parses to, on both stores,
// for the edge values of every field, and from an instance that reads the item for the first time.
import type { LightMyRequestResponse } from 'fastify'
import t, { type Test } from 'tap'
import { type RouteOperationId, routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'
import { contractSerializer, framedItemSchema, keptItemText, TEXT } from '../../src/domain/serialized.js'
import { type Api, type Schemas } from '../support/api.js'
import { build } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

const NAME_MAX = 200
const DESCRIPTION_MAX = 10_000
const CONTROL = Array.from({ length: 32 }, (_, code) => String.fromCharCode(code)).join('')

// Every kind of character the serializer treats apart, in names and descriptions at their shortest and longest.
const CREATIONS: Array<Schemas['CreateItemRequest']> = [
  { name: 'plain ASCII' },
  { name: 'x', description: '' },
  { name: 'quotes " and \\ backslashes \\" </script>', description: 'a "quoted" \\ path\\to\\file' },
  { name: `controls ${CONTROL}`, description: `\b\f\n\r\t${CONTROL}` },
  { name: 'Latin-1 é ü ÿ, BMP € 中文 \u2028 \u2029', description: 'combining e\u0301, zero width \u200b, BOM \ufeff' },
  { name: 'astral 𝄞 😀 🏳️‍🌈', description: '𝄞'.repeat(50) },
  { name: 'n'.repeat(NAME_MAX), description: 'd'.repeat(DESCRIPTION_MAX) },
  { name: '😀'.repeat(NAME_MAX), description: '€'.repeat(DESCRIPTION_MAX) },
  { name: `"${'\\'.repeat(NAME_MAX - 2)}"`, description: '\n'.repeat(DESCRIPTION_MAX) }
]

const responseSchema = (operationId: RouteOperationId, status: number): object => {
  const schema = routes.find((route) => route.operationId === operationId)?.schema.response[String(status)]
  if (schema === undefined) throw new Error(`${operationId} declares no ${status} body`)
  return schema
}

/** Whether the answer is exactly the contract's serialization of what it parses to, and its length its bytes. */
function sentAsSerialized (t: Test, response: LightMyRequestResponse, operationId: RouteOperationId, what: string): void {
  const reserialized = contractSerializer(responseSchema(operationId, response.statusCode))(response.json())
  t.equal(response.body, reserialized, `${what}: the contract's serialization, byte for byte`)
  t.equal(response.rawPayload.equals(Buffer.from(reserialized)), true, `${what}: the same bytes`)
  t.equal(response.headers['content-length'], String(response.rawPayload.length), `${what}: its length in bytes`)
  t.match(response.headers['content-type'], /^application\/json; charset=utf-8$/, `${what}: JSON`)
}

async function everyAnswer (t: Test, api: Api, again: Api): Promise<void> {
  const { accessToken: token } = await api.register({ role: 'contributor' })
  const ids: string[] = []
  for (const [index, creation] of CREATIONS.entries()) {
    const created = await api.call('createItem', { token, body: creation, headers: { 'idempotency-key': `key-${index}` } })
    t.equal(created.statusCode, 201)
    sentAsSerialized(t, created, 'createItem', `create ${index}`)
    const replayed = await api.call('createItem', { token, body: creation, headers: { 'idempotency-key': `key-${index}` } })
    t.equal(replayed.headers['idempotent-replayed'], 'true')
    t.equal(replayed.body, created.body, `replay ${index}: the created answer, byte for byte`)
    const { id } = created.json<Schemas['Item']>()
    ids.push(id)
    for (const [reader, instance] of [['this instance', api], ['an instance reading it first', again]] as const) {
      const got = await instance.call('getItem', { token, params: { itemId: id } })
      sentAsSerialized(t, got, 'getItem', `get ${index} from ${reader}`)
      t.equal(got.body, created.body, `get ${index} from ${reader}: as created`)
      t.equal(got.headers.etag, `"${got.json<Schemas['Item']>().updatedAt}"`, `get ${index} from ${reader}: tagged with its updatedAt`)
    }
    const edited = await api.call('updateItem', { token, params: { itemId: id }, body: { name: CREATIONS.at(-1 - index)!.name, status: 'archived' } })
    sentAsSerialized(t, edited, 'updateItem', `edit ${index}`)
    t.equal((await again.call('getItem', { token, params: { itemId: id } })).body, edited.body, `get ${index} after the edit: as edited`)
  }
  for (const instance of [api, again]) {
    const queries: Array<Record<string, string | number>> = [{ pageSize: 100 }, { pageSize: 1 }, { pageSize: 4, page: 2 }, { pageSize: 4, page: 9 }, { status: 'archived' }, { status: 'active' }]
    for (const query of queries) {
      const listed = await instance.call('listItems', { token, query })
      t.equal(listed.statusCode, 200)
      sentAsSerialized(t, listed, 'listItems', `list ${JSON.stringify(query)}`)
    }
  }
  const all = (await api.call('listItems', { token, query: { pageSize: 100 } })).json<Schemas['ItemList']>()
  t.same(all.data.map((item) => item.id), ids, 'every item listed, in creation order')
  t.same(all.data.map((item) => item.description), CREATIONS.map((creation) => creation.description ?? null), 'every description as sent')
}

t.test('on the memory store, each answer carrying items is its serialization, byte for byte', async (t) => {
  const api = await build(t, { STORE: 'memory' })
  // The memory store is the process's own: the one instance reads every item.
  await everyAnswer(t, api, api)
})

t.test('on Redis, each answer carrying items is its serialization, byte for byte, on the instance that wrote them and on another', { skip: await redisSkip() }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  await everyAnswer(t, await build(t, shared), await build(t, shared))
})

t.test('an item\'s text is framed id first and updatedAt last, whatever order the contract lists its properties in, so that reads of kept texts stay on their fast path', async (t) => {
  // The contract's Item with a property a maintainer adds after updatedAt.
  const withSku = { ...schemas.Item, $id: 'ItemWithSku', properties: { ...schemas.Item.properties, sku: { type: 'string' } } }
  const item = { id: '3b241101-e2bb-4255-8caf-4136c566a962', name: 'n', description: null, status: 'active', contributorId: '5d9f1c2e-8a7b-4c3d-9e2f-6a5b4c3d2e1f', createdAt: '2026-11-24T10:00:00.000Z', updatedAt: '2026-11-25T10:00:00.000Z', sku: 'A-1' }
  const framed = contractSerializer(framedItemSchema(withSku))(item)
  t.match(framed, /^\{"id":"[^"]+",.*"sku":"A-1","updatedAt":"2026-11-25T10:00:00\.000Z"\}$/, 'written id first, updatedAt last')
  const kept = keptItemText(Buffer.from(framed))
  t.ok(Buffer.isBuffer(kept[TEXT]), 'read as the bytes kept: the fast path')
  t.equal(kept.updatedAt, item.updatedAt, 'its ETag cut from its end')
  t.same(JSON.parse(framed), item, 'the same item')
  const inContractOrder = contractSerializer(withSku)(item)
  t.notOk(Buffer.isBuffer(keptItemText(Buffer.from(inContractOrder))[TEXT]), 'in the contract\'s own order it would not be')
})
