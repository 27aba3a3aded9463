// What changed between two contracts, as a release's changelog says it (oasdiff's changelog, in the terms a client
// team reads): operations, responses and their headers, parameters, component schemas, their properties and
// keywords, enum values, deprecations and webhooks, each named; any other difference but prose, by where it is.
// `npm run release` writes these under the version's heading, beside the maintainers' own lines. What breaks a client
// is the gate's (contract-breaking.ts); this lists every change a client can see, breaking or not. (oasdiff, which
// does this, is a Go program: not one of the npm registry's.)
import { type Document, isObject, resolve, type Schema } from './contract-breaking/schemas.js'

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const

interface Located { operation: Schema, path: string, method: string, pathItem: Schema }

/** Each operation of the document, by `METHOD /path`, with where it is. */
function operationsOf (document: Document): Map<string, Located> {
  const found = new Map<string, Located>()
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const operation = resolve(document, pathItem[method])
      if (isObject(operation)) found.set(`${method.toUpperCase()} ${path}`, { operation, path, method, pathItem })
    }
  }
  return found
}

const keysOf = (value: unknown): string[] => isObject(value) ? Object.keys(value) : []
const added = <T>(base: readonly T[], head: readonly T[]): T[] => head.filter((entry) => !base.includes(entry))
const named = (operation: Schema): string => typeof operation.operationId === 'string' ? ` (\`${operation.operationId}\`)` : ''

/** Enum values added to and removed from `where`'s schema. */
function enumChanges (base: unknown, head: unknown, where: string): string[] {
  const was = isObject(base) && Array.isArray(base.enum) ? base.enum.map(String) : []
  const now = isObject(head) && Array.isArray(head.enum) ? head.enum.map(String) : []
  return [
    ...added(was, now).map((value) => `Added enum value \`${value}\` to \`${where}\`.`),
    ...added(now, was).map((value) => `Removed enum value \`${value}\` from \`${where}\`.`)
  ]
}

// What a client cannot see: the words, the examples, and the version itself. A key is one of them only where it
// is a keyword: under `properties` (and the other maps of names) it names a field, which a client sees.
const PROSE = new Set(['description', 'summary', 'example', 'examples', 'info', 'externalDocs'])
const NAMES = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas', 'paths', 'webhooks', 'schemas',
  'responses', 'parameters', 'headers', 'content', 'requestBodies', 'securitySchemes', 'links', 'callbacks', 'pathItems', 'variables', 'encoding'])

/** The document as a client sees it: every prose keyword left out, at any depth. */
export function withoutProse (value: unknown, keysAreNames = false): unknown {
  if (Array.isArray(value)) return value.map((entry) => withoutProse(entry))
  if (!isObject(value)) return value
  return Object.fromEntries(Object.entries(value).filter(([key]) => keysAreNames || !PROSE.has(key))
    .map(([key, entry]) => [key, withoutProse(entry, !keysAreNames && NAMES.has(key))]))
}

// The keywords of a schema that bound or shape what a client sends or reads, each change of which is listed by name.
const KEYWORDS = ['type', 'format', 'pattern', 'minLength', 'maxLength', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'minItems', 'maxItems', 'uniqueItems', 'minProperties', 'maxProperties', 'const', 'default', 'nullable', 'readOnly', 'writeOnly', 'additionalProperties'] as const

const pointer = (...segments: string[]): string => segments.map((segment) => `/${segment.replace(/~/g, '~0').replace(/\//g, '~1')}`).join('')
const shown = (value: unknown): string => value === undefined ? 'none' : `\`${JSON.stringify(value)}\``

/** Each changed keyword of `KEYWORDS` between two schemas of `what`, one line each, under `at`. */
function keywordChanges (base: unknown, head: unknown, what: string, at: string, note: (at: string, line: string) => void): void {
  const [was, now] = [isObject(base) ? base : {}, isObject(head) ? head : {}]
  for (const keyword of KEYWORDS) {
    if (JSON.stringify(was[keyword]) !== JSON.stringify(now[keyword])) note(`${at}/${keyword}`, `Changed \`${keyword}\` of ${what} from ${shown(was[keyword])} to ${shown(now[keyword])}.`)
  }
}

/** An operation's parameters, its path's included, resolved, by where and name (`query limit`). */
function parametersOf (document: Document, pathItem: Schema, operation: Schema): Map<string, Schema> {
  const found = new Map<string, Schema>()
  for (const listed of [pathItem.parameters, operation.parameters]) {
    for (const entry of Array.isArray(listed) ? listed : []) {
      const parameter = resolve(document, entry)
      if (isObject(parameter)) found.set(`${String(parameter.in)} ${String(parameter.name)}`, parameter)
    }
  }
  return found
}

type Difference = { at: string, change: 'Added' | 'Removed' | 'Changed' }

/** The places at which two documents differ, as JSON pointers (an array of another length: the array). */
function differences (base: unknown, head: unknown, at = ''): Difference[] {
  if (isObject(base) && isObject(head)) {
    return [...new Set([...Object.keys(base), ...Object.keys(head)])].flatMap((key) => differences(base[key], head[key], `${at}${pointer(key)}`))
  }
  if (Array.isArray(base) && Array.isArray(head) && base.length === head.length) return base.flatMap((entry, index) => differences(entry, head[index], `${at}/${index}`))
  if (JSON.stringify(base) === JSON.stringify(head)) return []
  return [{ at, change: base === undefined ? 'Added' : head === undefined ? 'Removed' : 'Changed' }]
}

/**
 * The changes a client of `base` can see in `head`, one changelog line each: named ones for what a client team
 * reads about (operations, responses and their headers, parameters, schemas, properties, keywords, enum values,
 * deprecations, webhooks), and a line for each other place that differs, so that no change goes unlisted.
 */
export function contractChanges (base: Document, head: Document): string[] {
  const changes: string[] = []
  // Where each named line's change is: a difference under one of them is said.
  const said: string[] = []
  const note = (at: string, line: string): void => {
    said.push(at)
    changes.push(line)
  }
  const [was, now] = [operationsOf(base), operationsOf(head)]
  for (const [where, { operation, path, method, pathItem }] of now) {
    const at = pointer('paths', path, method)
    const before = was.get(where)
    if (before === undefined) {
      note(at, `Added operation \`${where}\`${named(operation)}.`)
      continue
    }
    if (operation.deprecated === true && before.operation.deprecated !== true) note(`${at}/deprecated`, `Deprecated operation \`${where}\`${named(operation)}.`)
    if (operation.deprecated !== true && before.operation.deprecated === true) note(`${at}/deprecated`, `Operation \`${where}\`${named(operation)} is no longer deprecated.`)
    const [responses, responsesNow] = [resolve(base, before.operation.responses), resolve(head, operation.responses)]
    for (const status of added(keysOf(responses), keysOf(responsesNow))) note(`${at}/responses/${status}`, `Added response ${status} to \`${where}\`.`)
    for (const status of added(keysOf(responsesNow), keysOf(responses))) note(`${at}/responses/${status}`, `Removed response ${status} from \`${where}\`.`)
    for (const status of keysOf(responsesNow).filter((key) => keysOf(responses).includes(key))) {
      const [headers, headersNow] = [resolve(base, (resolve(base, (responses as Schema)[status]) as Schema | undefined)?.headers), resolve(head, (resolve(head, (responsesNow as Schema)[status]) as Schema | undefined)?.headers)]
      for (const header of added(keysOf(headers), keysOf(headersNow))) note(`${at}/responses/${status}/headers/${header}`, `Added response header \`${header}\` to ${status} of \`${where}\`.`)
      for (const header of added(keysOf(headersNow), keysOf(headers))) note(`${at}/responses/${status}/headers/${header}`, `Removed response header \`${header}\` from ${status} of \`${where}\`.`)
    }
    const [parameters, parametersNow] = [parametersOf(base, before.pathItem, before.operation), parametersOf(head, pathItem, operation)]
    // Listed at the operation and at its path, in any order: a line about one says both places.
    const parametersAt = `${at}/parameters`
    const noteParameter = (line: string): void => {
      note(parametersAt, line)
      said.push(pointer('paths', path, 'parameters'))
    }
    for (const [key, parameter] of parametersNow) {
      const [place, name] = key.split(' ')
      const old = parameters.get(key)
      if (old === undefined) noteParameter(`Added ${parameter.required === true ? 'required' : 'optional'} ${String(place)} parameter \`${String(name)}\` to \`${where}\`.`)
      else {
        if ((old.required === true) !== (parameter.required === true)) noteParameter(`Made ${String(place)} parameter \`${String(name)}\` of \`${where}\` ${parameter.required === true ? 'required' : 'optional'}.`)
        keywordChanges(resolve(base, old.schema), resolve(head, parameter.schema), `${String(place)} parameter \`${String(name)}\` of \`${where}\``, parametersAt, (_at, line) => { noteParameter(line) })
        for (const line of enumChanges(resolve(base, old.schema), resolve(head, parameter.schema), `${String(place)} parameter ${String(name)} of ${where}`)) noteParameter(line)
      }
    }
    for (const key of added([...parametersNow.keys()], [...parameters.keys()])) {
      const [place, name] = key.split(' ')
      noteParameter(`Removed ${String(place)} parameter \`${String(name)}\` from \`${where}\`.`)
    }
  }
  for (const [where, { operation, path, method }] of was) if (!now.has(where)) note(pointer('paths', path, method), `Removed operation \`${where}\`${named(operation)}.`)

  const [schemas, schemasNow] = [base.components?.schemas ?? {}, head.components?.schemas ?? {}]
  for (const [name, schema] of Object.entries(schemasNow)) {
    const at = pointer('components', 'schemas', name)
    const before = schemas[name]
    if (before === undefined) {
      note(at, `Added schema \`${name}\`.`)
      continue
    }
    for (const line of enumChanges(before, schema, name)) note(`${at}/enum`, line)
    keywordChanges(before, schema, `\`${name}\``, at, note)
    const [properties, propertiesNow] = [isObject(before) ? before.properties : undefined, isObject(schema) ? schema.properties : undefined]
    const [required, requiredNow] = [isObject(before) && Array.isArray(before.required) ? before.required : [], isObject(schema) && Array.isArray(schema.required) ? schema.required : []]
    for (const property of added(keysOf(properties), keysOf(propertiesNow))) {
      note(`${at}/properties/${property}`, `Added ${requiredNow.includes(property) ? 'required' : 'optional'} property \`${name}.${property}\`.`)
      said.push(`${at}/required`)
    }
    for (const property of added(keysOf(propertiesNow), keysOf(properties))) {
      note(`${at}/properties/${property}`, `Removed property \`${name}.${property}\`.`)
      said.push(`${at}/required`)
    }
    for (const property of keysOf(propertiesNow).filter((key) => keysOf(properties).includes(key))) {
      const propertyAt = `${at}/properties/${pointer(property).slice(1)}`
      const [old, current] = [isObject(properties) ? properties[property] : undefined, isObject(propertiesNow) ? propertiesNow[property] : undefined]
      for (const line of enumChanges(old, current, `${name}.${property}`)) note(`${propertyAt}/enum`, line)
      keywordChanges(old, current, `\`${name}.${property}\``, propertyAt, note)
      if (required.includes(property) !== requiredNow.includes(property)) note(`${at}/required`, `Made property \`${name}.${property}\` ${requiredNow.includes(property) ? 'required' : 'optional'}.`)
      if (isObject(current) && current.deprecated === true && !(isObject(old) && old.deprecated === true)) note(`${propertyAt}/deprecated`, `Deprecated property \`${name}.${property}\`.`)
    }
  }
  for (const name of added(Object.keys(schemasNow), Object.keys(schemas))) note(pointer('components', 'schemas', name), `Removed schema \`${name}\`.`)

  const [webhooks, webhooksNow] = [Object.keys(base.webhooks ?? {}), Object.keys(head.webhooks ?? {})]
  for (const name of added(webhooks, webhooksNow)) note(pointer('webhooks', name), `Added webhook \`${name}\`.`)
  for (const name of added(webhooksNow, webhooks)) note(pointer('webhooks', name), `Removed webhook \`${name}\`.`)

  const unsaid = differences(withoutProse(base), withoutProse(head)).filter(({ at }) => !said.some((place) => at === place || at.startsWith(`${place}/`)))
  return [...changes, ...unsaid.map(({ at, change }) => `${change} \`${at}\`.`)]
}
