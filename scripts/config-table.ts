// Writes docs/configuration.md's table from src/config/environment.ts, between its markers; test/config/config.test.ts
// fails when the page's table is not the schema's.
import { readFileSync, writeFileSync } from 'node:fs'
import { configurationTable } from '../src/config/environment.js'

export const CONFIGURATION_PAGE = 'docs/configuration.md'
export const TABLE_START = '<!-- configuration table: npm run docs:config writes it from src/config/environment.ts -->'
export const TABLE_END = '<!-- end of configuration table -->'

/** The page with its configuration table replaced by the schema's. */
export function withCurrentTable (page: string): string {
  const start = page.indexOf(TABLE_START)
  const end = page.indexOf(TABLE_END)
  if (start === -1 || end < start) throw new Error(`${CONFIGURATION_PAGE} has no configuration table markers`)
  return `${page.slice(0, start + TABLE_START.length)}\n${configurationTable()}\n${page.slice(end)}`
}

if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(CONFIGURATION_PAGE, withCurrentTable(readFileSync(CONFIGURATION_PAGE, 'utf8')))
  console.log(`wrote the configuration table of ${CONFIGURATION_PAGE}`)
}
