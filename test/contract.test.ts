import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { routes } from '../generated/routes.js'
import { findDrift } from '../scripts/generate.js'

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

t.test('the route table has the nine operations of the spec and the two health checks', async (t) => {
  t.same(routes.map((route) => route.operationId).sort(), [
    'checkLiveness', 'checkReadiness', 'createItem', 'deleteItem', 'getItem', 'listItems', 'loginUser', 'logoutUser',
    'refreshTokens', 'registerUser', 'updateItem'
  ])
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
