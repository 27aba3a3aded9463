// fast-check arbitraries built from the contract's JSON Schemas (the route table): values the schema accepts, and
// values mutated the ways clients get requests wrong.
import fc from 'fast-check'
import type { JsonSchema } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'

type Schema = JsonSchema & {
  $ref?: string
  type?: string | readonly string[]
  properties?: Record<string, Schema>
  required?: readonly string[]
  enum?: readonly unknown[]
  const?: unknown
  format?: string
  minLength?: number
  maxLength?: number
  minimum?: number
  maximum?: number
  minProperties?: number
  additionalProperties?: boolean
  items?: Schema
  minItems?: number
  maxItems?: number
  uniqueItems?: boolean
}

// The keywords `valid` makes values of, and those that say nothing of a value (annotations, this suite's own): a
// schema with any other is refused, so that a keyword the contract comes to use is never fuzzed as if it were not
// there (values it takes for valid that the contract refuses).
const KNOWN_KEYWORDS = new Set(['$ref', '$id', 'type', 'properties', 'required', 'enum', 'const', 'format', 'minLength', 'maxLength', 'minimum',
  'maximum', 'minProperties', 'additionalProperties', 'items', 'minItems', 'maxItems', 'uniqueItems', 'title', 'description', 'examples',
  'example', 'default', 'deprecated', 'x-canonical-uuid', 'x-extensible-enum'])

const componentSchemas: Readonly<Record<string, Schema>> = schemas

// The route table refers to the contract's component schemas by their $id.
const resolved = (schema: Schema): Schema => {
  const unknown = Object.keys(schema).filter((keyword) => !KNOWN_KEYWORDS.has(keyword))
  if (unknown.length > 0) throw new Error(`the fuzz generator knows no ${unknown.join(', ')} (in ${JSON.stringify(schema)}): teach it the keyword`)
  if (schema.$ref === undefined) return schema
  const target = componentSchemas[schema.$ref]
  if (target === undefined) throw new Error(`unknown schema ${schema.$ref}`)
  return resolved(target)
}

const types = (schema: Schema): readonly string[] => typeof schema.type === 'string' ? [schema.type] : schema.type ?? ['object']

function validString (schema: Schema): fc.Arbitrary<string> {
  const minLength = schema.minLength ?? 0
  const maxLength = schema.maxLength ?? 1000
  if (schema.format === 'uuid') return fc.uuid()
  if (schema.format === 'email') return fc.emailAddress().filter((email) => email.length <= maxLength)
  return fc.oneof(
    fc.string({ unit: 'binary', minLength, maxLength: Math.min(maxLength, 40) }),
    fc.string({ minLength, maxLength: Math.min(maxLength, 40) }),
    // The boundaries themselves, in characters that take two UTF-16 units.
    fc.constant('😀'.repeat(maxLength)),
    fc.constant('x'.repeat(Math.max(minLength, 1)))
  )
}

/** Values the schema accepts. */
export function valid (reference: Schema): fc.Arbitrary<unknown> {
  const schema = resolved(reference)
  if (schema.const !== undefined) return fc.constant(schema.const)
  if (schema.enum !== undefined) return fc.constantFrom(...schema.enum)
  return fc.oneof(...types(schema).map((type): fc.Arbitrary<unknown> => {
    switch (type) {
      case 'null': return fc.constant(null)
      case 'boolean': return fc.boolean()
      case 'integer': return fc.integer({ min: schema.minimum ?? -(2 ** 31), max: schema.maximum ?? 2 ** 31 - 1 })
      case 'string': return validString(schema)
      case 'array': {
        const constraints = { minLength: schema.minItems ?? 0, maxLength: schema.maxItems ?? 10 }
        const item = valid(schema.items ?? {})
        return schema.uniqueItems === true ? fc.uniqueArray(item, { ...constraints, selector: (value) => JSON.stringify(value) }) : fc.array(item, constraints)
      }
      default: {
        const properties = schema.properties ?? {}
        const record = fc.record(
          Object.fromEntries(Object.entries(properties).map(([name, property]) => [name, valid(property)])),
          { requiredKeys: [...schema.required ?? []] }
        )
        return record.filter((value) => Object.keys(value).length >= (schema.minProperties ?? 0))
      }
    }
  }))
}

// Anything JSON can carry, including the awkward cases: nulls, arrays for objects, huge and fractional numbers.
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, 0.5, -1),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom('', ' ', '\u0000', '../../etc/passwd', '<script>', '{"$ne":null}', '__proto__'),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 3 })
)

// What a number or an id may arrive as from a hostile or careless client: text that coerces to a number that is
// not finite, to -0 or to hex, padded digits, a digit run no number holds, an encoded NUL.
const HOSTILE_TEXT = ['Infinity', '-Infinity', 'NaN', '1e400', '-1e309', '-0', '0x10', ' 10', '9'.repeat(5000), '%00', '\u0000']

function mutatedObject (schema: Schema): fc.Arbitrary<unknown> {
  const properties = schema.properties ?? {}
  const names = Object.keys(properties)
  const base = valid(schema) as fc.Arbitrary<Record<string, unknown>>
  const mutations: Array<fc.Arbitrary<unknown>> = [
    // An unknown field.
    fc.tuple(base, fc.string({ minLength: 1, maxLength: 12 }).filter((name) => !names.includes(name)), anyJson)
      .map(([value, name, extra]) => ({ ...value, [name]: extra }))
  ]
  if ((schema.required ?? []).length > 0) {
    // A required field left out.
    mutations.push(fc.tuple(base, fc.constantFrom(...(schema.required ?? [])))
      .map(([value, name]) => Object.fromEntries(Object.entries(value).filter(([key]) => key !== name))))
  }
  if (names.length > 0) {
    // One field wrong in one of the ways a single value can be.
    mutations.push(fc.tuple(base, fc.constantFrom(...names)).chain(([value, name]) =>
      mutated(properties[name] ?? {}).map((wrong) => ({ ...value, [name]: wrong }))))
  }
  return fc.oneof(...mutations)
}

/** Values that are wrong somewhere: the wrong type, out of bounds, missing or unknown fields (or now and then valid). */
export function mutated (reference: Schema): fc.Arbitrary<unknown> {
  const schema = resolved(reference)
  const kinds = types(schema)
  const mutations: Array<fc.Arbitrary<unknown>> = [anyJson]
  if (kinds.includes('object')) mutations.push(mutatedObject(schema))
  if (kinds.includes('string')) {
    if (schema.maxLength !== undefined) mutations.push(fc.constant('x'.repeat(schema.maxLength + 1)))
    if ((schema.minLength ?? 0) > 0) mutations.push(fc.constant(''))
    if (schema.format !== undefined) mutations.push(fc.string({ unit: 'binary', maxLength: 40 }), fc.constantFrom(...HOSTILE_TEXT))
  }
  if (kinds.includes('integer')) {
    mutations.push(fc.constantFrom((schema.minimum ?? 0) - 1, (schema.maximum ?? 2 ** 53) + 1, 1.5, '12abc', ...HOSTILE_TEXT))
  }
  return fc.oneof(...mutations)
}
