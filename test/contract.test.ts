import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
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

t.test('generated/ is what openapi.yaml produces (run npm run generate after editing the contract)', async (t) => {
  t.same(await findDrift(), [])
})

t.test('the route table has exactly the operations openapi.yaml declares, at their methods and paths', async (t) => {
  const fromTable = routes.map(({ operationId, method, url }) => ({ operationId, method, path: url.replace(/:(\w+)/g, '{$1}') }))
  const byId = (a: { operationId: string }, b: { operationId: string }): number => a.operationId.localeCompare(b.operationId)
  t.same(fromTable.sort(byId), contractOperations().sort(byId))
})

t.test('the contract lints clean under Redocly recommended', async (t) => {
  const { stdout } = await run('npx', ['redocly', 'lint', 'openapi.yaml', '--format', 'json'], { env: quiet })
  const report = JSON.parse(stdout.slice(stdout.indexOf('{'))) as { totals: { errors: number, warnings: number } }
  t.same(report.totals, { errors: 0, warnings: 0, ignored: 0 }, 'zero errors and zero warnings')
})

t.test('the contract lints clean under Spectral spectral:oas', async (t) => {
  const { stdout } = await run('npx', ['spectral', 'lint', '--format', 'json', '--quiet', 'openapi.yaml'], { env: quiet })
  t.same(JSON.parse(stdout), [])
})
