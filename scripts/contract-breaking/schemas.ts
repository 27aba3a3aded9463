// What the gate against breaking clients (scripts/contract-breaking.ts) compares of two schemas: bounds, types,
// values, properties, each change judged by the way its data flows.
export type Schema = Record<string, unknown>
export interface Document {
  info: { version: string }
  paths?: Record<string, Record<string, unknown>>
  webhooks?: Record<string, Record<string, unknown>>
  security?: Array<Record<string, string[]>>
  components?: Record<string, Record<string, unknown>>
}

// Which way data flows: what a client sends may only be accepted more widely, what it receives only promised more.
export type Direction = 'request' | 'response'

// Limits a client's input must stay under, and over: a lower upper bound or a higher lower bound refuses input that
// was valid.
const UPPER_BOUNDS = ['maxLength', 'maximum', 'exclusiveMaximum', 'maxItems', 'maxProperties'] as const
const LOWER_BOUNDS = ['minLength', 'minimum', 'exclusiveMinimum', 'minItems', 'minProperties'] as const
// Keywords whose any change, where this comparison does not look inside, is taken as breaking.
const OPAQUE = ['oneOf', 'anyOf', 'not', 'if', 'then', 'else'] as const

export const isObject = (value: unknown): value is Schema => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The value a local `$ref` (`#/components/...`) points at, followed until it is not a reference. */
export function resolve (document: Document, value: unknown, seen = new Set<string>()): unknown {
  if (!isObject(value) || typeof value.$ref !== 'string') return value
  const ref = value.$ref
  if (seen.has(ref)) return {}
  seen.add(ref)
  let target: unknown = document
  for (const segment of ref.replace(/^#\//, '').split('/')) target = isObject(target) ? target[segment.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined
  return resolve(document, target, seen)
}

/** A schema resolved, and its `allOf` merged into one: properties, required fields and keywords of every part. */
function flatten (document: Document, value: unknown, seen = new Set<string>()): Schema {
  const ref = isObject(value) && typeof value.$ref === 'string' ? value.$ref : undefined
  if (ref !== undefined && seen.has(ref)) return {}
  const nextSeen = ref === undefined ? seen : new Set([...seen, ref])
  const schema = resolve(document, value)
  if (!isObject(schema)) return {}
  const { allOf, ...own } = schema
  if (!Array.isArray(allOf)) return own
  const merged: Schema = { ...own }
  for (const part of allOf.map((entry) => flatten(document, entry, nextSeen))) {
    for (const [keyword, partValue] of Object.entries(part)) {
      if (keyword === 'properties') merged.properties = { ...(isObject(merged.properties) ? merged.properties : {}), ...(isObject(partValue) ? partValue : {}) }
      else if (keyword === 'required') merged.required = [...new Set([...(Array.isArray(merged.required) ? merged.required : []), ...(Array.isArray(partValue) ? partValue : [])])]
      else merged[keyword] ??= partValue
    }
  }
  return merged
}

/** The types a schema allows, `null` among them when it is nullable (3.1's `type: [t, 'null']` or 3.0's `nullable`). */
function types (schema: Schema): Set<string> | undefined {
  const declared = schema.type === undefined ? undefined : new Set(Array.isArray(schema.type) ? schema.type.map(String) : [String(schema.type)])
  if (declared !== undefined && schema.nullable === true) declared.add('null')
  return declared
}

const names = (values: Iterable<unknown>): string => [...values].map((value) => JSON.stringify(value)).join(', ')

const VALUE_RULES = ['pattern', 'format', 'const'] as const
type Constraint = typeof UPPER_BOUNDS[number] | typeof LOWER_BOUNDS[number] | typeof VALUE_RULES[number]
const BOUNDS: readonly Constraint[] = [...UPPER_BOUNDS, ...LOWER_BOUNDS]

/** The constraints on which `stricter` admits less than `looser`: a lower upper bound, a higher lower bound, a rule on values it adds or changes. */
function tightened (looser: Schema, stricter: Schema): Constraint[] {
  const bound = (schema: Schema, keyword: Constraint): number | undefined => typeof schema[keyword] === 'number' ? schema[keyword] : undefined
  return [
    ...UPPER_BOUNDS.filter((keyword) => (bound(stricter, keyword) ?? Infinity) < (bound(looser, keyword) ?? Infinity)),
    ...LOWER_BOUNDS.filter((keyword) => (bound(stricter, keyword) ?? -Infinity) > (bound(looser, keyword) ?? -Infinity)),
    ...VALUE_RULES.filter((keyword) => stricter[keyword] !== undefined && JSON.stringify(stricter[keyword]) !== JSON.stringify(looser[keyword]))
  ]
}

function constraintChange (keyword: Constraint, was: unknown, now: unknown, change: 'narrowed' | 'widened'): string {
  if (BOUNDS.includes(keyword)) return `${keyword} ${change} from ${String(was ?? 'none')} to ${String(now ?? 'none')}`
  if (was === undefined) return `${keyword} added (${JSON.stringify(now)})`
  if (now === undefined) return `${keyword} no longer promised (was ${JSON.stringify(was)})`
  return `${keyword} changed from ${JSON.stringify(was)} to ${JSON.stringify(now)}`
}

/** Each way `head` breaks a client of `base` for data flowing in `direction`, at `where`. */
export function compareSchemas (baseDocument: Document, headDocument: Document, baseValue: unknown, headValue: unknown, where: string, direction: Direction, depth = 0): string[] {
  if (depth > 32) return []
  const base = flatten(baseDocument, baseValue)
  const head = flatten(headDocument, headValue)
  const found: string[] = []
  const baseTypes = types(base)
  const headTypes = types(head)
  if (direction === 'request') {
    if (headTypes !== undefined && (baseTypes === undefined || [...baseTypes].some((type) => !headTypes.has(type) && !(type === 'integer' && headTypes.has('number'))))) {
      found.push(`${where}: type ${baseTypes === undefined ? 'any' : names(baseTypes)} is now ${names(headTypes)}`)
    }
    for (const keyword of tightened(base, head)) found.push(`${where}: ${constraintChange(keyword, base[keyword], head[keyword], 'narrowed')}`)
    if (Array.isArray(head.enum)) {
      const removed = Array.isArray(base.enum) ? base.enum.filter((value) => !(head.enum as unknown[]).includes(value)) : ['any value']
      if (removed.length > 0) found.push(`${where}: enum no longer accepts ${names(removed)}`)
    }
    const baseRequired = new Set(Array.isArray(base.required) ? base.required : [])
    for (const name of Array.isArray(head.required) ? head.required : []) {
      if (!baseRequired.has(name)) found.push(`${where}.${String(name)}: newly required`)
    }
    const headProperties = isObject(head.properties) ? head.properties : {}
    if (head.additionalProperties === false) {
      if (base.additionalProperties !== false) found.push(`${where}: no longer accepts properties it does not name`)
      for (const name of Object.keys(isObject(base.properties) ? base.properties : {})) {
        if (!(name in headProperties)) found.push(`${where}.${name}: no longer accepted`)
      }
    }
  } else {
    // What a response promises may only narrow: the keywords on which base is stricter than head.
    for (const keyword of tightened(head, base)) found.push(`${where}: ${constraintChange(keyword, base[keyword], head[keyword], 'widened')}`)
    if (baseTypes !== undefined && (headTypes === undefined || [...headTypes].some((type) => !baseTypes.has(type) && !(type === 'integer' && baseTypes.has('number'))))) {
      found.push(`${where}: type ${names(baseTypes)} is now ${headTypes === undefined ? 'any' : names(headTypes)}${headTypes?.has('null') === true && !baseTypes.has('null') ? ' (nullable)' : ''}`)
    }
    const headProperties = isObject(head.properties) ? head.properties : {}
    for (const name of Object.keys(isObject(base.properties) ? base.properties : {})) {
      if (!(name in headProperties)) found.push(`${where}.${name}: removed`)
    }
    const headRequired = new Set(Array.isArray(head.required) ? head.required : [])
    for (const name of Array.isArray(base.required) ? base.required : []) {
      if (!headRequired.has(name) && String(name) in headProperties) found.push(`${where}.${String(name)}: no longer required (may be absent)`)
    }
    // A client's exhaustive switch over the values it was promised breaks on a new one, unless the schema told it
    // to expect more (`x-extensible-enum: true`, as the error codes do).
    if (Array.isArray(base.enum) && Array.isArray(head.enum) && head['x-extensible-enum'] !== true) {
      const added = head.enum.filter((value) => !(base.enum as unknown[]).includes(value))
      if (added.length > 0) found.push(`${where}: enum may now be ${names(added)} (mark it x-extensible-enum: true to promise clients more values)`)
    }
  }
  for (const keyword of OPAQUE) {
    if (JSON.stringify(base[keyword]) !== JSON.stringify(head[keyword])) found.push(`${where}: ${keyword} changed (not compared inside; check by hand)`)
  }
  const baseProperties = isObject(base.properties) ? base.properties : {}
  const headProperties = isObject(head.properties) ? head.properties : {}
  for (const [name, property] of Object.entries(baseProperties)) {
    if (name in headProperties) found.push(...compareSchemas(baseDocument, headDocument, property, headProperties[name], `${where}.${name}`, direction, depth + 1))
  }
  if (base.items !== undefined && head.items !== undefined) {
    found.push(...compareSchemas(baseDocument, headDocument, base.items, head.items, `${where}[]`, direction, depth + 1))
  }
  if (isObject(base.additionalProperties) && isObject(head.additionalProperties)) {
    found.push(...compareSchemas(baseDocument, headDocument, base.additionalProperties, head.additionalProperties, `${where}{}`, direction, depth + 1))
  }
  return found
}
