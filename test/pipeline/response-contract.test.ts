import Fastify from 'fastify'
import t from 'tap'
import { routes } from '../../generated/routes.js'
import { loadConfig } from '../../src/config/config.js'
import { enforceResponseContract, findResponseViolation } from '../../src/pipeline/response-contract.js'
import { storedItem } from '../../src/domain/serialized.js'
import { build, captureLogs } from '../support/app.js'
import { INTERNAL_ERROR_BODY } from '../../src/errors.js'

const route = (operationId: string) => {
  const found = routes.find((candidate) => candidate.operationId === operationId)
  if (found === undefined) throw new Error(operationId)
  return found
}
const json = { 'content-type': 'application/json; charset=utf-8' }
// An item response's headers: JSON, with its entity tag.
const itemJson = { ...json, etag: '"2026-11-21T09:30:00.000Z"' }
const item = {
  id: '00000000-0000-4000-8000-000000000000',
  name: 'n',
  description: null,
  status: 'active',
  contributorId: '00000000-0000-4000-8000-000000000001',
  createdAt: '2026-11-21T09:30:00.000Z',
  updatedAt: '2026-11-21T09:30:00.000Z'
}

t.test('findResponseViolation names each way a response can break the contract', async (t) => {
  const getItem = route('getItem')
  t.equal(findResponseViolation(getItem, { statusCode: 200, headers: itemJson, body: JSON.stringify(item) }), undefined)
  t.match(findResponseViolation(getItem, { statusCode: 200, headers: json, body: JSON.stringify(item) }), /required header missing: etag/)
  t.match(findResponseViolation(getItem, { statusCode: 409, headers: json, body: '{}' }), /status 409 is not declared for getItem/)
  t.match(findResponseViolation(getItem, { statusCode: 200, headers: itemJson, body: JSON.stringify({ ...item, name: undefined }) }), /breaks the schema: .*name/)
  t.match(findResponseViolation(getItem, { statusCode: 200, headers: itemJson, body: JSON.stringify({ ...item, status: 'deleted' }) }), /breaks the schema: \/status/)
  t.match(findResponseViolation(getItem, { statusCode: 200, headers: { ...itemJson, 'content-type': 'text/html' }, body: '<p>' }), /content-type text\/html/)
  t.match(findResponseViolation(getItem, { statusCode: 200, headers: itemJson, body: '{"id":' }), /not JSON/)
  t.match(findResponseViolation(route('deleteItem'), { statusCode: 204, headers: json, body: '{}' }), /declares no body/)
  t.match(findResponseViolation(route('createItem'), { statusCode: 201, headers: json, body: JSON.stringify(item) }), /required header missing: location/)
  t.match(findResponseViolation(getItem, { statusCode: 401, headers: json, body: '{"code":"INVALID_TOKEN","message":"m"}' }), /required header missing: www-authenticate/)
})

t.test('with CONTRACT_STRICT_RESPONSES the service answers a logged 500 instead of a response that breaks the contract', async (t) => {
  const { lines, logStream } = captureLogs()
  const api = await build(t, { CONTRACT_STRICT_RESPONSES: '1', LOG_LEVEL: 'error' }, { logStream })
  const { accessToken } = await api.register()
  // A store that hands out an item with a status the contract does not know, as a buggy store might.
  api.app.store.items.get = async () => storedItem({ ...item, status: 'deleted' as 'active' })
  const response = await api.call('getItem', { token: accessToken, params: { itemId: item.id } })
  t.equal(response.statusCode, 500)
  t.same(response.json(), INTERNAL_ERROR_BODY)
  t.match(lines.join(''), /"operationId":"getItem".*"violation":"the body breaks the schema: \/status/)
})

t.test('a bodiless response with an undeclared status becomes a JSON 500', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(async () => { await app.close() })
  // deleteItem declares 204; a handler answering 200 with no body breaks the contract.
  app.delete('/v1/items/:itemId', { onSend: [enforceResponseContract(route('deleteItem'))] }, async (_request, reply) => reply.code(200).send())
  const response = await app.inject({ method: 'DELETE', url: `/v1/items/${item.id}` })
  t.equal(response.statusCode, 500)
  t.match(response.headers['content-type'], /^application\/json/)
  t.same(response.json(), INTERNAL_ERROR_BODY)
})

t.test('without it the response leaves as it is, and the test helper catches it', async (t) => {
  const api = await build(t, { CONTRACT_STRICT_RESPONSES: '0' })
  const { accessToken } = await api.register()
  api.app.store.items.get = async () => storedItem({ ...item, status: 'deleted' as 'active' })
  await t.rejects(api.call('getItem', { token: accessToken, params: { itemId: item.id } }), { name: 'ContractViolation', message: /breaks the schema: \/status/ })
})

t.test('strict responses cannot be switched on in production', async (t) => {
  t.throws(() => loadConfig({ NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32), CONTRACT_STRICT_RESPONSES: '1' }),
    { message: /CONTRACT_STRICT_RESPONSES is for development and test/ })
})
