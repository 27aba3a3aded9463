// The gate against breaking clients: `npm run contract:breaking -- BASE` compares the working tree's openapi.yaml
// with BASE (a file, or a git ref whose openapi.yaml is read) and names every change that would break a client built
// against BASE. It fails on one unless the major version went up. Hand-written: of the packages that diff OpenAPI
// documents, Optic 1.0.9 passes a narrowed maxLength, openapi-diff refuses OpenAPI 3.1 and oasdiff is not on npm.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parse } from 'yaml'

type Schema = Record<string, unknown>
export interface Document {
  info: { version: string }
  paths?: Record<string, Record<string, unknown>>
  webhooks?: Record<string, Record<string, unknown>>
  security?: Array<Record<string, string[]>>
  components?: Record<string, Record<string, unknown>>
}

// Which way data flows: what a client sends may only be accepted more widely, what it receives only promised more.
type Direction = 'request' | 'response'

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const
// Limits a client's input must stay under, and over: a lower upper bound or a higher lower bound refuses input that
// was valid.
const UPPER_BOUNDS = ['maxLength', 'maximum', 'exclusiveMaximum', 'maxItems', 'maxProperties'] as const
const LOWER_BOUNDS = ['minLength', 'minimum', 'exclusiveMinimum', 'minItems', 'minProperties'] as const
// Keywords whose any change, where this comparison does not look inside, is taken as breaking.
const OPAQUE = ['oneOf', 'anyOf', 'not', 'if', 'then', 'else'] as const

const isObject = (value: unknown): value is Schema => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The value a local `$ref` (`#/components/...`) points at, followed until it is not a reference. */
function resolve (document: Document, value: unknown, seen = new Set<string>()): unknown {
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
function compareSchemas (baseDocument: Document, headDocument: Document, baseValue: unknown, headValue: unknown, where: string, direction: Direction, depth = 0): string[] {
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

interface Operation {
  id: string
  where: string
  value: Schema
  /** Path-level parameters first, overridden by the operation's own, by `in` and name. */
  parameters: Map<string, Schema>
}

function operations (document: Document): Map<string, Operation> {
  const found = new Map<string, Operation>()
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const value = resolve(document, pathItem[method])
      if (!isObject(value)) continue
      const parameters = new Map<string, Schema>()
      for (const entry of [...(Array.isArray(pathItem.parameters) ? pathItem.parameters : []), ...(Array.isArray(value.parameters) ? value.parameters : [])]) {
        const parameter = resolve(document, entry)
        if (isObject(parameter)) parameters.set(`${String(parameter.in)} ${String(parameter.name)}`, parameter)
      }
      // Path templates name their parameters; a renamed one is the same path.
      const key = `${method.toUpperCase()} ${path.replace(/\{[^}]+\}/g, '{}')}`
      found.set(key, { id: String(value.operationId ?? key), where: `${method.toUpperCase()} ${path}`, value, parameters })
    }
  }
  return found
}

/** How a client writes a parameter into the request: its style and explode, the defaults of its `in` where unsaid. */
function serialization (parameter: Schema): string {
  const style = typeof parameter.style === 'string' ? parameter.style : parameter.in === 'query' || parameter.in === 'cookie' ? 'form' : 'simple'
  const explode = typeof parameter.explode === 'boolean' ? parameter.explode : style === 'form'
  return `style ${style}${explode ? ', exploded' : ''}`
}

/** The security a client must satisfy: one of these sets of schemes; an empty set means none. */
function securityOf (document: Document, operation: Schema): string[][] {
  const requirements = Array.isArray(operation.security) ? operation.security : document.security ?? []
  if (requirements.length === 0) return [[]]
  return requirements.map((requirement) => Object.keys(isObject(requirement) ? requirement : {}).sort())
}

const responsesOf = (document: Document, operation: Schema): Schema => {
  const responses = resolve(document, operation.responses)
  return isObject(responses) ? responses : {}
}

const jsonSchemaOf = (document: Document, holder: unknown): Map<string, unknown> => {
  const resolved = resolve(document, holder)
  const content = isObject(resolved) && isObject(resolved.content) ? resolved.content : {}
  return new Map(Object.entries(content).map(([mediaType, media]) => [mediaType, isObject(media) ? media.schema : undefined]))
}

function compareBodies (base: Document, head: Document, baseHolder: unknown, headHolder: unknown, where: string, direction: Direction): string[] {
  const found: string[] = []
  const headMedia = jsonSchemaOf(head, headHolder)
  for (const [mediaType, schema] of jsonSchemaOf(base, baseHolder)) {
    if (!headMedia.has(mediaType)) {
      found.push(`${where} ${mediaType}: ${direction === 'request' ? 'no longer accepted' : 'no longer sent'}`)
      continue
    }
    found.push(...compareSchemas(base, head, schema, headMedia.get(mediaType), `${where} ${mediaType}`, direction))
  }
  return found
}

function compareOperation (base: Document, head: Document, was: Operation, now: Operation): string[] {
  const where = `${now.where} (${was.id})`
  const found: string[] = []
  if (was.id !== now.id) found.push(`${was.where}: operationId ${was.id} renamed ${now.id}`)
  for (const [key, parameter] of was.parameters) {
    const current = now.parameters.get(key)
    if (current === undefined) {
      // A path parameter may be renamed with its template: the same position, another name.
      if (parameter.in !== 'path') found.push(`${where}: ${parameter.in} parameter ${String(parameter.name)} removed or renamed`)
      continue
    }
    if (current.required === true && parameter.required !== true) found.push(`${where}: ${current.in} parameter ${String(current.name)} now required`)
    const [wasSent, nowSent] = [serialization(parameter), serialization(current)]
    if (wasSent !== nowSent) found.push(`${where}: ${String(current.in)} parameter ${String(current.name)} serialized ${nowSent}, was ${wasSent}`)
    found.push(...compareSchemas(base, head, parameter.schema, current.schema, `${where}: ${String(current.in)} parameter ${String(current.name)}`, 'request'))
  }
  for (const [key, parameter] of now.parameters) {
    if (!was.parameters.has(key) && parameter.required === true && parameter.in !== 'path') found.push(`${where}: new required ${parameter.in} parameter ${String(parameter.name)}`)
  }
  const [baseBody, headBody] = [resolve(base, was.value.requestBody), resolve(head, now.value.requestBody)]
  if (isObject(headBody) && headBody.required === true && !(isObject(baseBody) && baseBody.required === true)) found.push(`${where}: request body now required`)
  if (isObject(baseBody) && isObject(headBody)) found.push(...compareBodies(base, head, baseBody, headBody, `${where}: request body`, 'request'))
  const [baseResponses, headResponses] = [responsesOf(base, was.value), responsesOf(head, now.value)]
  for (const [status, response] of Object.entries(baseResponses)) {
    if (!(status in headResponses)) {
      // An error status no longer declared breaks no client: it handles every status the operation may still send
      // (as oasdiff judges response-non-success-status-removed). The suite holds the service to that: every
      // response it sees must be one the contract declares (CONTRACT_STRICT_RESPONSES). A success removed is a
      // change of what the operation does.
      if (!isErrorStatus(status)) found.push(`${where}: response ${status} removed`)
      continue
    }
    found.push(...compareBodies(base, head, response, headResponses[status], `${where}: response ${status}`, 'response'))
    const [baseHeaders, headHeaders] = [resolve(base, response), resolve(head, headResponses[status])].map((value) => isObject(value) && isObject(value.headers) ? value.headers : {})
    for (const name of Object.keys(baseHeaders ?? {})) {
      if (!(name in (headHeaders ?? {}))) found.push(`${where}: response ${status} header ${name} removed`)
    }
  }
  const allowed = securityOf(base, was.value)
  for (const requirement of securityOf(head, now.value)) {
    if (!allowed.some((before) => requirement.every((scheme) => before.includes(scheme)))) {
      found.push(`${where}: security requirement ${requirement.length === 0 ? 'none' : requirement.join(' + ')} added`)
    }
  }
  return found
}

function compareWebhooks (base: Document, head: Document): string[] {
  const found: string[] = []
  const headWebhooks = head.webhooks ?? {}
  for (const [name, pathItem] of Object.entries(base.webhooks ?? {})) {
    const current = headWebhooks[name]
    if (current === undefined) {
      found.push(`webhook ${name}: removed`)
      continue
    }
    for (const method of METHODS) {
      const [was, now] = [resolve(base, pathItem[method]), resolve(head, current[method])]
      if (!isObject(was)) continue
      if (!isObject(now)) {
        found.push(`webhook ${name}: ${method.toUpperCase()} removed`)
        continue
      }
      // The service sends the event: to its receivers it is a response.
      found.push(...compareBodies(base, head, was.requestBody, now.requestBody, `webhook ${name}: payload`, 'response'))
    }
  }
  return found
}

/**
 * Whether an operation of the base may go without breaking its clients: it was deprecated, with a sunset day that
 * has passed by `today` (oasdiff's rule: clients were told on every response, and until when).
 */
function sunsetPassed (operation: Operation, today: string): boolean {
  const sunset = operation.value['x-sunset']
  return operation.value.deprecated === true && typeof sunset === 'string' && sunset < today
}

/** Every change in `head` that breaks a client built against `base`, one line each; `today` as YYYY-MM-DD. */
export function breakingChanges (base: Document, head: Document, today = new Date().toISOString().slice(0, 10)): string[] {
  const found: string[] = []
  const headOperations = operations(head)
  for (const [key, was] of operations(base)) {
    const now = headOperations.get(key)
    if (now === undefined) {
      if (!sunsetPassed(was, today)) {
        const why = was.value.deprecated === true ? typeof was.value['x-sunset'] === 'string' ? `before its sunset (${was.value['x-sunset']})` : 'with no sunset set' : 'without being deprecated first'
        found.push(`${was.where} (${was.id}): removed ${why}`)
      }
    } else {
      found.push(...compareOperation(base, head, was, now))
    }
  }
  found.push(...compareWebhooks(base, head))
  return found
}

const major = (version: string): number => Number(/^(\d+)\./.exec(version)?.[1] ?? Number.NaN)

/** Reads BASE: a file, or else a git ref whose openapi.yaml it is. */
/** A base named by the user that is neither a file nor a git ref with an openapi.yaml. */
export class UnknownBaseError extends Error {
  override name = 'UnknownBaseError'
}

export function readBase (base: string): Document {
  if (existsSync(base)) return parse(readFileSync(base, 'utf8')) as Document
  try {
    return parse(execFileSync('git', ['show', `${base}:openapi.yaml`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })) as Document
  } catch {
    throw new UnknownBaseError(`${base} is neither a file nor a git ref whose openapi.yaml can be read`)
  }
}

const isErrorStatus = (status: string): boolean => /^[45]/.test(status)

const changesText = (count: number): string => `${count} breaking change${count === 1 ? '' : 's'}`

/** The gate's verdict: exit status and what it prints. */
export function verdict (base: Document, head: Document, baseName: string): { status: number, lines: string[] } {
  const changes = breakingChanges(base, head)
  const versions = `${base.info.version} → ${head.info.version}`
  if (changes.length === 0) return { status: 0, lines: [`openapi.yaml (${head.info.version}) breaks no client of ${baseName} (${base.info.version})`] }
  const listed = changes.map((change) => `  ${change}`)
  if (major(head.info.version) > major(base.info.version)) {
    return { status: 0, lines: [`${changesText(changes.length)} against ${baseName}, allowed by the major version (${versions}):`, ...listed] }
  }
  return {
    status: 1,
    lines: [`${changesText(changes.length)} against ${baseName} (${versions}); make ${changes.length === 1 ? 'it' : 'them'} additive, or raise the major version:`, ...listed]
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const baseName = process.argv[2]
  if (baseName === undefined) {
    console.error('usage: npm run contract:breaking -- BASE   (a released contract, e.g. contracts/1.0.0.yaml, or a git ref, e.g. v1.0.0)')
    process.exit(2)
  }
  let base: Document
  try {
    base = readBase(baseName)
  } catch (error) {
    if (!(error instanceof UnknownBaseError)) throw error
    console.error(`${error.message}; usage: npm run contract:breaking -- BASE`)
    process.exit(2)
  }
  const { status, lines } = verdict(base, parse(readFileSync('openapi.yaml', 'utf8')) as Document, baseName)
  for (const line of lines) (status === 0 ? console.log : console.error)(line)
  process.exitCode = status
}
