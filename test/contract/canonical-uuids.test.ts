// Every uuid a request carries is canonical from the moment it is read, wherever the contract puts it: found here
// by walking both contracts' request schemas, not listed by hand, so a uuid added to either is checked too.
import type { ValidateFunction } from 'ajv'
import t from 'tap'
import { routes as operationsRoutes } from '../../generated/operations/routes.js'
import { schemas as operationsSchemas } from '../../generated/operations/schemas.js'
import { operationValidators as operationsValidators } from '../../generated/operations/validators.js'
import { routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'
import { operationValidators } from '../../generated/validators.js'

type Json = { readonly [key: string]: unknown }
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value)

const CANONICAL = '7a0c1e2d-3f4b-4a5c-8d6e-9f0a1b2c3d4e'
const SPELLINGS = [CANONICAL.toUpperCase(), `urn:uuid:${CANONICAL}`, `urn:uuid:${CANONICAL.toUpperCase()}`, `URN:UUID:${CANONICAL}`]

/** The places of every `format: uuid` in a schema: property names, and `[]` for an array's items. */
function uuidPlaces (schema: unknown, components: Readonly<Record<string, unknown>>, path: readonly string[] = [], seen = new Set<unknown>()): string[][] {
  if (!isObject(schema) || seen.has(schema)) return []
  const inner = new Set(seen).add(schema)
  if (typeof schema.$ref === 'string') return uuidPlaces(components[schema.$ref], components, path, inner)
  if (schema.type === 'string' && schema.format === 'uuid') return [[...path]]
  const properties = isObject(schema.properties) ? Object.entries(schema.properties) : []
  const alternatives = ['allOf', 'anyOf', 'oneOf'].flatMap((key) => Array.isArray(schema[key]) ? schema[key] as unknown[] : [])
  return [
    ...properties.flatMap(([name, property]) => uuidPlaces(property, components, [...path, name], inner)),
    ...uuidPlaces(schema.items, components, [...path, '[]'], inner),
    ...alternatives.flatMap((alternative) => uuidPlaces(alternative, components, path, inner))
  ]
}

// A value that holds `uuid` at `place` and nothing else.
const holding = (place: readonly string[], uuid: string): unknown =>
  place.length === 0 ? uuid : place[0] === '[]' ? [holding(place.slice(1), uuid)] : { [place[0]!]: holding(place.slice(1), uuid) }
const at = (value: unknown, place: readonly string[]): unknown =>
  place.reduce<unknown>((inner, key) => key === '[]' ? (inner as unknown[])[0] : (inner as Json)[key], value)

const contracts = [
  { name: 'openapi.yaml', routes, components: schemas, validators: operationValidators },
  { name: 'ops/openapi.yaml', routes: operationsRoutes, components: operationsSchemas, validators: operationsValidators }
] as const

let found = 0
for (const contract of contracts) {
  for (const route of contract.routes) {
    const validators: Readonly<Record<string, ValidateFunction | undefined>> = contract.validators[route.operationId as keyof typeof contract.validators]
    for (const part of ['params', 'querystring', 'headers', 'body'] as const) {
      for (const place of uuidPlaces(route.schema[part], contract.components)) {
        found += 1
        t.test(`${contract.name} ${route.operationId} ${part}.${place.join('.')}: every spelling of a uuid is read as its canonical form`, async (t) => {
          const validate = validators[part]
          t.ok(validate, 'a generated validator reads it')
          for (const spelling of SPELLINGS) {
            const value = holding(place, spelling)
            validate?.(value)
            t.equal(at(value, place), CANONICAL, spelling)
          }
        })
      }
    }
  }
}

t.test('the walk finds the uuids the contracts are known to carry', async (t) => {
  // itemId in three operations, contributorId in one; eventIds in the operations API.
  t.ok(found >= 5, `${found} places`)
})
