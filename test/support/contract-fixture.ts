// The fixture contract the tests of the contract's scripts (test/scripts/) change, one case at a time: edited as a
// YAML document, and only where the fixture has what a case names, since a path the document does not have would be
// made up, leaving the case's change unmade.
import { readFileSync } from 'node:fs'
import { type Document as YamlDocument, parse, parseDocument } from 'yaml'
import type { Document } from '../../scripts/contract-breaking.js'

const FIXTURE = readFileSync('test/fixtures/contracts/base.yaml', 'utf8')

/** The fixture as the scripts read a contract. */
export const fixture = (): Document => parse(FIXTURE) as Document

export type Edit = (contract: YamlDocument) => void

/** The fixture with `change` made: a path it edits under, or deletes, that the fixture has not throws. */
export function changedFixture (change: Edit): Document {
  const contract = parseDocument(FIXTURE)
  const there = (path: readonly unknown[]): void => {
    if (!contract.hasIn(path)) throw new Error(`the fixture has no ${path.join(' > ')}`)
  }
  const { setIn, addIn, deleteIn } = contract
  contract.setIn = (path, value) => {
    const steps = [...path ?? []]
    there(steps.slice(0, -1))
    setIn.call(contract, steps, value)
  }
  contract.addIn = (path, value) => {
    there([...path])
    addIn.call(contract, path, value)
  }
  contract.deleteIn = (path) => {
    there([...path ?? []])
    return deleteIn.call(contract, path)
  }
  change(contract)
  return contract.toJS() as Document
}

/** Paths into the fixture: a schema's, GET /things's parameters, its `limit` parameter's, POST /things's, /things/{thingId}'s. */
export const schema = (...path: string[]): string[] => ['components', 'schemas', ...path]
export const parameters = ['paths', '/things', 'get', 'parameters']
export const limitParameter = (...path: string[]): Array<string | number> => [...parameters, 0, ...path]
export const post = (...path: string[]): string[] => ['paths', '/things', 'post', ...path]
export const thingPath = (...path: Array<string | number>): Array<string | number> => ['paths', '/things/{thingId}', ...path]
