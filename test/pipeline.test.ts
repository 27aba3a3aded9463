// Each operation's pipeline as the service builds it, every capability on as in production (rate limits, load
// shedding, metrics on OPS_PORT), printed, and held to docs/contract.md's list of it.
import { readFile } from 'node:fs/promises'
import Fastify from 'fastify'
import t from 'tap'
import { type RouteOperationId, routes } from '../generated/routes.js'
import { loadConfig } from '../src/config.js'
import { itemsService } from '../src/service.js'
import { testEnvironment } from './helper.js'

async function pipelines (env: NodeJS.ProcessEnv): Promise<Map<RouteOperationId, readonly string[]>> {
  const host = Fastify({ logger: false })
  const found = new Map<RouteOperationId, readonly string[]>()
  host.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    if (operationId !== undefined) found.set(operationId, route.config?.pipeline ?? [])
  })
  await host.register(itemsService, { config: loadConfig({ ...testEnvironment, STORE: 'memory', ...env }) })
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
  t.same(built.get('createItem'), ['load shedding', 'limits by address', 'authentication', 'role', 'idempotency', 'limits by caller', 'metrics'])
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
