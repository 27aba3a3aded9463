// Each operation's pipeline as the service builds it, every capability on as in production (rate limits, load
// shedding, metrics on OPS_PORT), printed, and held to docs/contract.md's list of it.
import { readFile } from 'node:fs/promises'
import Fastify from 'fastify'
import t from 'tap'
import { routes } from '../../generated/routes.js'
import { loadConfig } from '../../src/config/config.js'
import { itemsService } from '../../src/app/service.js'
import { testEnvironment } from '../support/app.js'

async function pipelines (env: NodeJS.ProcessEnv): Promise<Map<string, readonly string[]>> {
  const host = Fastify({ logger: false })
  const found = new Map<string, readonly string[]>()
  host.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    if (operationId !== undefined) found.set(operationId, route.config?.pipeline ?? [])
  })
  await host.register(itemsService, { config: loadConfig({ ...testEnvironment(), STORE: 'memory', ...env }) })
  await host.close()
  return found
}

const asProduction = { RATE_LIMIT: 'on', OPS_PORT: '0', CONTRACT_STRICT_RESPONSES: '0', MAX_EVENT_LOOP_DELAY_MS: '200' }

t.test('each operation runs the steps its contract declares, in the pipeline\'s order, as docs/contract.md lists them', async (t) => {
  const built = await pipelines(asProduction)
  const table = routes.map(({ operationId }) => `| \`${operationId}\` | ${(built.get(operationId) ?? []).join(' → ')} |`)
  t.comment(`Each operation's pipeline:\n${table.join('\n')}`)
  t.same(built.get('listItems'), ['load shedding', 'authentication', 'metrics'], 'a read pays for what it declares only')
  t.same(built.get('loginUser'), ['load shedding', 'limits by address', 'limits by caller', 'metrics'])
  t.same(built.get('createItem'), ['load shedding', 'limits by address', 'authentication', 'role', 'limits by caller', 'idempotency', 'metrics'])
  t.same(built.get('deleteItem'), ['limits by address', 'authentication', 'role', 'limits by caller', 'metrics'], 'x-load-shedding: exempt')
  const docs = await readFile('docs/contract.md', 'utf8')
  t.ok(docs.includes(table.join('\n')), 'docs/contract.md shows each operation\'s pipeline as the service builds it')
})

t.test('a capability that is off adds no step to any route', async (t) => {
  const built = await pipelines({ RATE_LIMIT: 'off', CONTRACT_STRICT_RESPONSES: '0' })
  t.same(built.get('loginUser'), ['load shedding'], 'no limits, no metrics without OPS_PORT')
  t.same(built.get('createItem'), ['load shedding', 'authentication', 'role', 'idempotency'])
  const strict = await pipelines({ RATE_LIMIT: 'off', CONTRACT_STRICT_RESPONSES: '1' })
  t.same(strict.get('getItem'), ['load shedding', 'authentication', 'response contract'])
})

t.test('a stale generated/ (a request part without its validator) stops the start, naming the fix', async (t) => {
  const { generatedValidator } = await import('../../src/pipeline/index.js')
  t.type(generatedValidator({ method: 'GET', url: '/v1/items', httpPart: 'querystring' }), 'function', 'a part the contract declares has its validator')
  // A contract that gained a body for listItems, and generated/ from before: the route asks for a validator that is not there.
  t.throws(() => generatedValidator({ method: 'GET', url: '/v1/items', httpPart: 'body' }), { message: 'No generated validator for GET /v1/items body; run npm run generate' })
  t.type(generatedValidator({ method: 'POST', url: '/v1/items', httpPart: 'headers' }), 'function', 'header parameters have theirs')
  t.throws(() => generatedValidator({ method: 'GET', url: '/v1/items', httpPart: 'headers' }), { message: /run npm run generate$/ }, 'an operation without header parameters has none')
  t.throws(() => generatedValidator({ method: 'POST', url: '/v1/items', httpPart: 'cookies' }), { message: /run npm run generate$/ }, 'nor does a part the generator never validates')
  t.throws(() => generatedValidator({ method: 'GET', url: '/v1/new-operation', httpPart: 'querystring' }), { message: /^No generated validator for GET \/v1\/new-operation querystring/ })
})
