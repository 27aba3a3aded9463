// The route table: what each operation declares (its parameters, bodies and responses as schemas, its roles, limits,
// idempotency, shedding and deprecation), and the modules that state it.
import { resolve as resolveReferences } from '@apidevtools/json-schema-ref-parser'
import { contractOperations, isObject, type JsonObject, jsonContentSchema, type Resolve, resolverOf, withSchemaIds } from './contract.js'

// Header names are lower-cased, as Node gives them to Fastify.
function parameterSchema (parameters: JsonObject[], location: 'path' | 'query' | 'header'): JsonObject | undefined {
  const selected = parameters.filter((parameter) => parameter.in === location)
  if (selected.length === 0) return undefined
  const nameOf = (parameter: JsonObject): string => location === 'header' ? String(parameter.name).toLowerCase() : String(parameter.name)
  return {
    type: 'object',
    properties: Object.fromEntries(selected.map((parameter) => [nameOf(parameter), withSchemaIds(parameter.schema)])),
    required: selected.filter((parameter) => parameter.required === true).map(nameOf)
  }
}

export interface RouteEntry {
  operationId: string
  method: string
  url: string
  security: string[]
  roles: string[]
  rateLimits: string[]
  idempotent: boolean
  sheddable: boolean
  statuses: string[]
  requiredHeaders: Record<string, string[]>
  deprecation?: Deprecation
  schema: {
    params?: JsonObject
    querystring?: JsonObject
    headers?: JsonObject
    body?: JsonObject
    response: Record<string, JsonObject>
  }
}

function requiredResponseHeaders (responses: Record<string, JsonObject>, resolve: Resolve): Record<string, string[]> {
  return Object.fromEntries(Object.entries(responses).flatMap(([status, response]) => {
    const headers = isObject(response.headers) ? response.headers : {}
    const required = Object.entries(headers)
      .filter(([, header]) => resolve(header).required === true)
      .map(([name]) => name.toLowerCase())
    return required.length === 0 ? [] : [[status, required]]
  }))
}

// The IETF draft's header: an operation that declares it as a parameter takes retries keyed by it.
const IDEMPOTENCY_KEY = 'idempotency-key'

/** The response fields a deprecated operation answers with, made once here: their values never change. */
interface Deprecation {
  /** RFC 9745: `@` and the epoch seconds of `x-deprecated-at`. */
  deprecation: string
  /** RFC 8594: the HTTP-date of `x-sunset`, when the operation has one. */
  sunset?: string
  /** RFC 9745 §3: where the deprecation is documented (the operation's `externalDocs`, or its place in Swagger UI). */
  link: string
}

const DATE = /^\d{4}-\d{2}-\d{2}$/
const dateOf = (operationId: string, extension: string, value: unknown): Date => {
  if (typeof value !== 'string' || !DATE.test(value) || Number.isNaN(Date.parse(value))) {
    throw new Error(`${operationId}: ${extension} must be a date (YYYY-MM-DD), not ${JSON.stringify(value)}`)
  }
  return new Date(`${value}T00:00:00Z`)
}

/** What a deprecated operation (\`deprecated: true\`, \`x-deprecated-at\`, and \`x-sunset\` if it has one) says on the wire. */
function deprecationOf (operation: JsonObject): Deprecation | undefined {
  const operationId = String(operation.operationId)
  if (operation.deprecated !== true) {
    if (operation['x-sunset'] !== undefined || operation['x-deprecated-at'] !== undefined) throw new Error(`${operationId}: x-sunset and x-deprecated-at need deprecated: true`)
    return undefined
  }
  const since = dateOf(operationId, 'x-deprecated-at', operation['x-deprecated-at'])
  const sunset = operation['x-sunset'] === undefined ? undefined : dateOf(operationId, 'x-sunset', operation['x-sunset'])
  const tag = Array.isArray(operation.tags) ? String(operation.tags[0]) : 'default'
  const docs = isObject(operation.externalDocs) && typeof operation.externalDocs.url === 'string' ? operation.externalDocs.url : `/docs/#/${tag}/${operationId}`
  return {
    deprecation: `@${since.getTime() / 1000}`,
    ...(sunset === undefined ? {} : { sunset: sunset.toUTCString() }),
    link: `<${docs}>; rel="deprecation"; type="text/html"`
  }
}

const withDeprecation = (operation: JsonObject): { deprecation?: Deprecation } => {
  const deprecation = deprecationOf(operation)
  return deprecation === undefined ? {} : { deprecation }
}

/** The route table of a contract, as the generated routes module states it. */
export async function routeTableOf (document: JsonObject): Promise<RouteEntry[]> {
  return buildRouteTable(document, resolverOf(await resolveReferences(document)))
}

export function buildRouteTable (document: JsonObject, resolve: Resolve): RouteEntry[] {
  const routes: RouteEntry[] = []
  for (const { path, method, operation, parameters, security } of contractOperations(document, resolve)) {
    const responses = Object.fromEntries(Object.entries(resolve(operation.responses))
      .map(([status, definition]) => [status, resolve(definition)]))
    const response: Record<string, JsonObject> = {}
    for (const [status, definition] of Object.entries(responses)) {
      const schema = jsonContentSchema(definition)
      if (schema) response[status] = schema
    }
    const schema: RouteEntry['schema'] = { response }
    const params = parameterSchema(parameters, 'path')
    const querystring = parameterSchema(parameters, 'query')
    const headers = parameterSchema(parameters, 'header')
    const body = operation.requestBody === undefined ? undefined : jsonContentSchema(resolve(operation.requestBody))
    if (params) schema.params = params
    if (querystring) schema.querystring = querystring
    if (headers) schema.headers = headers
    if (body) schema.body = body
    routes.push({
      operationId: String(operation.operationId),
      method: method.toUpperCase(),
      url: path.replace(/\{([^}]+)\}/g, ':$1'),
      security,
      roles: Array.isArray(operation['x-roles']) ? operation['x-roles'].map(String) : [],
      rateLimits: Array.isArray(operation['x-rate-limits']) ? operation['x-rate-limits'].map(String) : [],
      idempotent: parameters.some((parameter) => parameter.in === 'header' && String(parameter.name).toLowerCase() === IDEMPOTENCY_KEY),
      sheddable: operation['x-load-shedding'] !== 'exempt',
      statuses: Object.keys(responses),
      requiredHeaders: requiredResponseHeaders(responses, resolve),
      ...withDeprecation(operation),
      schema
    })
  }
  return routes
}

export function defaultedParameters (route: RouteEntry): string[] {
  return [route.schema.params, route.schema.querystring].flatMap((schema) =>
    Object.entries((schema?.properties ?? {}) as Record<string, JsonObject>)
      .filter(([, property]) => property.default !== undefined)
      .map(([name]) => name))
}

export function schemasModule (banner: string, schemas: Record<string, JsonObject>): string {
  return `${banner}/**
 * The contract's component schemas, each with its name as \`$id\`. The route table and the validators refer to
 * them by that id (\`{ "$ref": "Item" }\`), so each is stated once.
 */
export const schemas = ${JSON.stringify(schemas, null, 2)} as const

export type SchemaName = keyof typeof schemas
`
}

export function routeTableModule (banner: string, routes: RouteEntry[], channels: string[], hasRoles: boolean): string {
  return `${banner}${hasRoles ? "import type { components } from './openapi.js'\n\ntype Role = components['schemas']['Role']" : '// The contract has no roles.\ntype Role = never'}

export type JsonSchema = { readonly [keyword: string]: unknown }

/** The operations served over HTTP (the contract's paths; its webhooks are events the service emits). */
export type RouteOperationId = ${routes.map((route) => `'${route.operationId}'`).join(' | ')}

/** The operations that take an \`Idempotency-Key\` header. */
export type IdempotentOperationId = ${routes.filter((route) => route.idempotent).map((route) => `'${route.operationId}'`).join(' | ') || 'never'}

/** The rate limits the operations count against (their \`x-rate-limits\`), by name. */
export type RateLimitName = ${[...new Set(routes.flatMap((route) => route.rateLimits))].map((name) => `'${name}'`).join(' | ') || 'never'}

export interface RouteDefinition {
  readonly operationId: RouteOperationId
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD' | 'OPTIONS' | 'TRACE'
  readonly url: string
  /** Names of the security schemes that protect the operation; empty for public operations. */
  readonly security: readonly string[]
  /** The roles allowed to call the operation (the contract's \`x-roles\`); empty when any signed-in user may. */
  readonly roles: readonly Role[]
  /** The rate limits the operation counts against, in the order it counts them (the contract's \`x-rate-limits\`). */
  readonly rateLimits: readonly RateLimitName[]
  /** Whether it takes an \`Idempotency-Key\` header (the contract declares the parameter): a retry with the key is answered once. */
  readonly idempotent: boolean
  /** Whether load shedding may refuse it with 503 (all but those whose \`x-load-shedding\` is \`exempt\`). */
  readonly sheddable: boolean
  /** Every status code the contract declares for the operation, with or without a body. */
  readonly statuses: readonly string[]
  /** The response headers the contract marks required, lower-cased, by status code. */
  readonly requiredHeaders: { readonly [status: string]: readonly string[] }
  /**
   * Present when the operation is deprecated (\`deprecated: true\`): the values of the fields every response of it
   * carries, \`Deprecation\` (RFC 9745, from \`x-deprecated-at\`), \`Sunset\` (RFC 8594, from \`x-sunset\`) and \`Link\`.
   */
  readonly deprecation?: { readonly deprecation: string, readonly sunset?: string, readonly link: string }
  /** JSON Schemas that refer to the component schemas of ./schemas.ts by their \`$id\`. */
  readonly schema: {
    readonly params?: JsonSchema
    readonly querystring?: JsonSchema
    /** The header parameters, by their lower-cased names. */
    readonly headers?: JsonSchema
    readonly body?: JsonSchema
    /** The JSON body schema of each documented status code that has a body. */
    readonly response: { readonly [status: string]: JsonSchema }
  }
}

/** The parameters of each operation that the request validators fill in with their default when a request leaves them out. */
export interface DefaultedParameters extends Record<RouteOperationId, string> {
${routes.map((route) => `  ${route.operationId}: ${defaultedParameters(route).map((name) => `'${name}'`).join(' | ') || 'never'}`).join('\n')}
}

export const routes: readonly RouteDefinition[] = ${JSON.stringify(routes, null, 2)}

/** The channels the service emits events on: the names of the contract's webhooks. */
export const channels = ${JSON.stringify(channels)} as const
`
}
