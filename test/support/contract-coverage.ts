// The operation/status pairs this test process saw, written when it exits for the check after the suite
// (test/support/contract-coverage-check.ts). Nothing is written, and no exit hook set, until a response is recorded.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'

/** Where each test process records what it saw. */
export const CONTRACT_COVERAGE_DIR = '.tap/contract-coverage'

let seen: Set<string> | undefined

function writeOnExit (pairs: Set<string>): void {
  process.once('exit', () => {
    mkdirSync(CONTRACT_COVERAGE_DIR, { recursive: true })
    const testFile = relative(process.cwd(), process.argv[1] ?? 'unknown')
    writeFileSync(join(CONTRACT_COVERAGE_DIR, `${testFile.replace(/[/\\]/g, '__')}.json`), JSON.stringify({ seen: [...pairs] }))
  })
}

/** Notes that a response of `status` to `operationId` was seen. */
export function recordSeen (operationId: string, status: number): void {
  if (seen === undefined) {
    seen = new Set()
    writeOnExit(seen)
  }
  seen.add(`${operationId} ${status}`)
}
