// Writes the README's configuration table from src/config/environment.ts, between its markers; test/config/config.test.ts fails
// when the README's table is not the schema's.
import { readFileSync, writeFileSync } from 'node:fs'
import { configurationTable } from '../src/config/environment.js'

export const README = 'README.md'
export const TABLE_START = '<!-- configuration table: npm run docs:config writes it from src/config/environment.ts -->'
export const TABLE_END = '<!-- end of configuration table -->'

/** The README with its configuration table replaced by the schema's. */
export function withCurrentTable (readme: string): string {
  const start = readme.indexOf(TABLE_START)
  const end = readme.indexOf(TABLE_END)
  if (start === -1 || end < start) throw new Error(`${README} has no configuration table markers`)
  return `${readme.slice(0, start + TABLE_START.length)}\n${configurationTable()}\n${readme.slice(end)}`
}

if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(README, withCurrentTable(readFileSync(README, 'utf8')))
  console.log(`wrote the configuration table of ${README}`)
}
