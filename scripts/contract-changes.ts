// What changed between two contracts, as a release's changelog says it (oasdiff's changelog, in the terms a client
// team reads): operations added, deprecated or removed; response statuses added or removed; component schemas and
// their properties added or removed; enum values added or removed; webhooks added or removed. `npm run release`
// writes these under the version's heading, beside the maintainers' own lines. What breaks a client is the gate's
// (contract-breaking.ts); this lists every change a client can see, breaking or not.
import { type Document, isObject, resolve, type Schema } from './contract-breaking/schemas.js'

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const

/** Each operation of the document, by `METHOD /path`. */
function operationsOf (document: Document): Map<string, Schema> {
  const found = new Map<string, Schema>()
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const operation = resolve(document, pathItem[method])
      if (isObject(operation)) found.set(`${method.toUpperCase()} ${path}`, operation)
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

/** The changes a client of `base` can see in `head`, one changelog line each. */
export function contractChanges (base: Document, head: Document): string[] {
  const changes: string[] = []
  const [was, now] = [operationsOf(base), operationsOf(head)]
  for (const [where, operation] of now) {
    const before = was.get(where)
    if (before === undefined) {
      changes.push(`Added operation \`${where}\`${named(operation)}.`)
      continue
    }
    if (operation.deprecated === true && before.deprecated !== true) changes.push(`Deprecated operation \`${where}\`${named(operation)}.`)
    const [statuses, statusesNow] = [keysOf(resolve(base, before.responses)), keysOf(resolve(head, operation.responses))]
    for (const status of added(statuses, statusesNow)) changes.push(`Added response ${status} to \`${where}\`.`)
    for (const status of added(statusesNow, statuses)) changes.push(`Removed response ${status} from \`${where}\`.`)
  }
  for (const [where, operation] of was) if (!now.has(where)) changes.push(`Removed operation \`${where}\`${named(operation)}.`)

  const [schemas, schemasNow] = [base.components?.schemas ?? {}, head.components?.schemas ?? {}]
  for (const [name, schema] of Object.entries(schemasNow)) {
    const before = schemas[name]
    if (before === undefined) {
      changes.push(`Added schema \`${name}\`.`)
      continue
    }
    changes.push(...enumChanges(before, schema, name))
    const [properties, propertiesNow] = [isObject(before) ? before.properties : undefined, isObject(schema) ? schema.properties : undefined]
    const required = isObject(schema) && Array.isArray(schema.required) ? schema.required : []
    for (const property of added(keysOf(properties), keysOf(propertiesNow))) {
      changes.push(`Added ${required.includes(property) ? 'required' : 'optional'} property \`${name}.${property}\`.`)
    }
    for (const property of added(keysOf(propertiesNow), keysOf(properties))) changes.push(`Removed property \`${name}.${property}\`.`)
    for (const property of keysOf(propertiesNow).filter((key) => keysOf(properties).includes(key))) {
      const [old, current] = [isObject(properties) ? properties[property] : undefined, isObject(propertiesNow) ? propertiesNow[property] : undefined]
      changes.push(...enumChanges(old, current, `${name}.${property}`))
      if (isObject(current) && current.deprecated === true && !(isObject(old) && old.deprecated === true)) changes.push(`Deprecated property \`${name}.${property}\`.`)
    }
  }
  for (const name of added(Object.keys(schemasNow), Object.keys(schemas))) changes.push(`Removed schema \`${name}\`.`)

  const [webhooks, webhooksNow] = [Object.keys(base.webhooks ?? {}), Object.keys(head.webhooks ?? {})]
  for (const name of added(webhooks, webhooksNow)) changes.push(`Added webhook \`${name}\`.`)
  for (const name of added(webhooksNow, webhooks)) changes.push(`Removed webhook \`${name}\`.`)
  return changes
}
