// Run by tap after the suite (package.json "tap.after"); with CONTRACT_COVERAGE=check, as `npm test` sets it, fails
// when an operation of the contract, or a response status it documents, was never seen by any test. Each test
// process records what it saw (contract-coverage.ts).
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { routes } from '../../generated/routes.js'
import { CONTRACT_COVERAGE_DIR } from './contract-coverage.js'

// A run of files none of which called the service leaves no directory: nothing was seen.
const records = (existsSync(CONTRACT_COVERAGE_DIR) ? readdirSync(CONTRACT_COVERAGE_DIR) : []).map((file) =>
  JSON.parse(readFileSync(join(CONTRACT_COVERAGE_DIR, file), 'utf8')) as { seen: string[] })
rmSync(CONTRACT_COVERAGE_DIR, { recursive: true, force: true })

if (process.env.CONTRACT_COVERAGE !== 'check') {
  console.log('contract coverage: not checked (npm test checks it)')
  process.exit(0)
}

const seen = new Set(records.flatMap((record) => record.seen))
const expected = routes.flatMap((route) => route.statuses.map((status) => `${route.operationId} ${status}`))
const missing = expected.filter((pair) => !seen.has(pair))
if (missing.length > 0) {
  console.error(`contract coverage: ${missing.length} documented responses were never exercised:\n${missing.map((pair) => `  ${pair}`).join('\n')}`)
  process.exit(1)
}
console.log(`contract coverage: all ${expected.length} documented responses exercised`)
