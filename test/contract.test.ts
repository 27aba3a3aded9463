import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { routes as operationsRoutes } from '../generated/operations/routes.js'
import { routes } from '../generated/routes.js'
import { findDrift } from '../scripts/generate.js'
import { contractOperations } from './helper.js'

const run = promisify(execFile)
const quiet = {
  ...process.env,
  REDOCLY_TELEMETRY: 'off',
  REDOCLY_SUPPRESS_NOTIFICATIONS: 'true',
  REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
  SCARF_ANALYTICS: 'false',
  DO_NOT_TRACK: '1',
  NO_UPDATE_NOTIFIER: '1'
}

t.test('generated/ is what the contracts produce (run npm run generate after editing one)', async (t) => {
  t.same(await findDrift(), [])
})

t.test('the route table has exactly the operations openapi.yaml declares, at their methods and paths', async (t) => {
  const fromTable = routes.map(({ operationId, method, url }) => ({ operationId, method, path: url.replace(/:(\w+)/g, '{$1}') }))
  const byId = (a: { operationId: string }, b: { operationId: string }): number => a.operationId.localeCompare(b.operationId)
  t.same(fromTable.sort(byId), contractOperations().sort(byId))
})

t.test('every operation of the operations API is under its one security scheme, opsToken, which the operations plugin enforces', async (t) => {
  t.same(operationsRoutes.filter((route) => route.security.join() !== 'opsToken').map((route) => route.operationId), [])
})

// The public API's contract and the operations API's.
const contracts = ['openapi.yaml', 'ops/openapi.yaml']

t.test('the contracts lint clean under Redocly recommended', async (t) => {
  for (const contract of contracts) {
    const { stdout } = await run('npx', ['redocly', 'lint', contract, '--format', 'json'], { env: quiet })
    const report = JSON.parse(stdout.slice(stdout.indexOf('{'))) as { totals: { errors: number, warnings: number } }
    t.same(report.totals, { errors: 0, warnings: 0, ignored: 0 }, `${contract}: zero errors and zero warnings`)
  }
})

t.test('the contracts lint clean under Spectral spectral:oas', async (t) => {
  const { stdout } = await run('npx', ['spectral', 'lint', '--format', 'json', '--quiet', ...contracts], { env: quiet })
  t.same(JSON.parse(stdout), [])
})
