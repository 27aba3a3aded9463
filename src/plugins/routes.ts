import type { ValidateFunction } from 'ajv'
import fastJson, { type AnySchema, type Schema } from 'fast-json-stringify'
import type { FastifyInstance, FastifySerializerCompiler, onRequestHookHandler, RouteHandlerMethod } from 'fastify'
import { type RouteDefinition, type RouteOperationId, routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'
import { operationValidators } from '../../generated/validators.js'
import type { Handlers } from '../handlers/handler.js'
import { requireRole } from './auth.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The operation of the contract that the route serves. */
    operationId?: RouteOperationId
  }
}

interface RoutesPluginOptions {
  handlers: Handlers
  /** The hook that enforces each security scheme of the contract, by the scheme's name in `components.securitySchemes`. */
  securitySchemes: Readonly<Record<string, onRequestHookHandler>>
  /** Check every response against the contract before it leaves (CONTRACT_STRICT_RESPONSES). */
  strictResponses: boolean
}

const REQUEST_PARTS = ['body', 'params', 'querystring', 'headers'] as const
type RequestPart = typeof REQUEST_PARTS[number]
type RequestValidators = Partial<Record<RequestPart, ValidateFunction>>
const isRequestPart = (part: string | undefined): part is RequestPart => REQUEST_PARTS.some((known) => known === part)
type ValidatorCompiler = (route: { method: string, url: string, httpPart?: string }) => ValidateFunction

/**
 * A validator compiler that compiles nothing: every request validator of a contract's routes was generated ahead of
 * time, so none is compiled at startup.
 */
export function generatedValidators<Id extends string> (table: ReadonlyArray<{ method: string, url: string, operationId: Id }>, validators: { readonly [Key in Id]: RequestValidators }): ValidatorCompiler {
  const byRoute = new Map(table.map((route) => [`${route.method} ${route.url}`, validators[route.operationId]]))
  return ({ method, url, httpPart }) => {
    const operation = byRoute.get(`${method} ${url}`)
    const validator = isRequestPart(httpPart) ? operation?.[httpPart] : undefined
    if (validator === undefined) throw new Error(`No generated validator for ${method} ${url} ${httpPart}; run npm run generate`)
    return validator
  }
}

/** The public API's. */
export const generatedValidator = generatedValidators(routes, operationValidators)

type Serializer = ReturnType<FastifySerializerCompiler<AnySchema>>

/**
 * Fastify's own serializer compiler (fast-json-stringify, with the contract's component schemas to resolve `$ref`s),
 * compiling each response schema once per process rather than once per app: the route schemas are the generated
 * module's objects, shared by every app a process builds (a host that registers the service more than once, the
 * tests).
 */
export function contractSerializers (componentSchemas: Readonly<Record<string, { readonly $id: string }>>): FastifySerializerCompiler<AnySchema> {
  // The generated schemas are `as const` (read-only arrays), which fast-json-stringify's types do not admit.
  const external = Object.fromEntries(Object.values(componentSchemas).map((schema) => [schema.$id, schema as Schema]))
  const compiled = new WeakMap<AnySchema, Serializer>()
  return ({ schema }) => {
    let serializer = compiled.get(schema)
    if (serializer === undefined) {
      serializer = fastJson(schema, { schema: external })
      compiled.set(schema, serializer)
    }
    return serializer
  }
}

/** The public API's. */
export const contractSerializer = contractSerializers(schemas)

// The hooks that guard an operation: its security scheme's, then its role check. A scheme with no hook, or a choice
// between schemes (which no operation offers yet), fails at start rather than letting a request through unchecked.
function securityHooks (route: RouteDefinition, securitySchemes: RoutesPluginOptions['securitySchemes']): onRequestHookHandler[] {
  const [scheme, ...alternatives] = route.security
  if (scheme === undefined) return []
  const authenticate = securitySchemes[scheme]
  if (authenticate === undefined || alternatives.length > 0) {
    throw new Error(`${route.operationId}: no hook enforces the security scheme(s) ${route.security.join(', ')} of the contract`)
  }
  return route.roles.length === 0 ? [authenticate] : [authenticate, requireRole(route.roles)]
}

/**
 * One route per operation of the contract: match → per-address limit (rate-limits plugin) → authenticate → role
 * → parse and validate → idempotency key, sign-in and write limits (preHandler) → handler → serialize with the
 * contract's response schema.
 */
export default async function routesPlugin (app: FastifyInstance, options: RoutesPluginOptions): Promise<void> {
  // Both compilers are the contract's, set in this context so that a host's own routes keep theirs. The route
  // schemas refer to the contract's component schemas by $id: the generated validators were built with them, and
  // contractSerializer resolves them itself, so none is added to Fastify.
  app.setValidatorCompiler(generatedValidator)
  app.setSerializerCompiler(contractSerializer)
  const guards = routes.map((route) => securityHooks(route, options.securitySchemes))
  // Loaded only in strict mode: a production start never loads the response validators.
  const enforceResponseContract = options.strictResponses ? (await import('../response-contract.js')).enforceResponseContract : undefined
  for (const [index, route] of routes.entries()) {
    app.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      onRequest: guards[index],
      onSend: enforceResponseContract === undefined ? [] : [enforceResponseContract(route)],
      handler: options.handlers[route.operationId] as RouteHandlerMethod,
      config: { operationId: route.operationId },
      // Only what the contract declares is served, in a host server too: no HEAD twin of a GET.
      exposeHeadRoute: false
    })
  }
}
