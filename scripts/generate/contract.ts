// What every generator reads of a contract: its component schemas, its references resolved, its operations.
import type { $Refs } from '@apidevtools/json-schema-ref-parser'

export type JsonObject = { [key: string]: unknown }

export interface GeneratedFile {
  path: string
  contents: string
}

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const
const SCHEMA_REF_PREFIX = '#/components/schemas/'

export function isObject (value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * The contract's schemas stay shared: each component schema gets its name as `$id`, and every
 * `#/components/schemas/Name` reference becomes `Name`, which Ajv, Fastify and fast-json-stringify resolve by id.
 */
export function withSchemaIds (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withSchemaIds)
  if (!isObject(value)) return value
  return Object.fromEntries(Object.entries(value).map(([key, entry]) =>
    [key, key === '$ref' && typeof entry === 'string' && entry.startsWith(SCHEMA_REF_PREFIX)
      ? entry.slice(SCHEMA_REF_PREFIX.length)
      : withSchemaIds(entry)]))
}

export function componentSchemas (document: JsonObject): Record<string, JsonObject> {
  const components = isObject(document.components) && isObject(document.components.schemas) ? document.components.schemas : {}
  return Object.fromEntries(Object.entries(components).map(([name, schema]) =>
    [name, { $id: name, ...(withSchemaIds(schema) as JsonObject) }]))
}

/** Follows the `$ref`s of the contract's own objects (responses, parameters, headers) to what they name. */
export type Resolve = (value: unknown) => JsonObject
export function resolverOf (refs: $Refs): Resolve {
  return (value) => {
    const seen = new Set<string>()
    let current = value
    while (isObject(current) && typeof current.$ref === 'string') {
      if (seen.has(current.$ref)) throw new Error(`$ref cycle through ${current.$ref}`)
      seen.add(current.$ref)
      current = refs.get(current.$ref)
    }
    if (!isObject(current)) throw new Error(`expected an object, got ${JSON.stringify(current)}`)
    return current
  }
}

export function jsonContentSchema (holder: JsonObject | undefined): JsonObject | undefined {
  if (holder === undefined || !isObject(holder.content)) return undefined
  const media = holder.content['application/json']
  return isObject(media) && isObject(media.schema) ? withSchemaIds(media.schema) as JsonObject : undefined
}

/** An operation of the contract, with its path-level and own parameters resolved and its security requirement. */
export interface ContractOperation {
  readonly path: string
  readonly method: typeof HTTP_METHODS[number]
  readonly operation: JsonObject
  readonly parameters: JsonObject[]
  /** The names of the security schemes it requires (the document's when it states none). */
  readonly security: string[]
}

export function * contractOperations (document: JsonObject, resolve: Resolve): Generator<ContractOperation> {
  const globalSecurity = Array.isArray(document.security) ? document.security : []
  for (const [path, pathItem] of Object.entries(resolve(document.paths))) {
    if (!isObject(pathItem)) continue
    const sharedParameters = Array.isArray(pathItem.parameters) ? pathItem.parameters : []
    for (const method of HTTP_METHODS) {
      const operation = pathItem[method]
      if (!isObject(operation)) continue
      const parameters = [...sharedParameters, ...(Array.isArray(operation.parameters) ? operation.parameters : [])].map(resolve)
      const security = (Array.isArray(operation.security) ? operation.security : globalSecurity)
        .flatMap((requirement: JsonObject) => Object.keys(requirement))
      yield { path, method, operation, parameters, security }
    }
  }
}
