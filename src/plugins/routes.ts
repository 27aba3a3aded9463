import type { ValidateFunction } from 'ajv'
import type { FastifyInstance, onRequestHookHandler, RouteHandlerMethod } from 'fastify'
import fp from 'fastify-plugin'
import { type RouteDefinition, type RouteOperationId, routes } from '../../generated/routes.js'
import { operationValidators } from '../../generated/validators.js'
import type { Handlers } from '../handlers/handler.js'
import { contractSerializer } from '../serialized.js'
import { requireRole } from './auth.js'
import { deprecationStep } from './deprecation.js'
import type { RouteStep, StepFor } from './route-steps.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The operation of the contract that the route serves. */
    operationId?: RouteOperationId
    /** The names of the steps of the route's pipeline, in the order they run. */
    pipeline?: readonly string[]
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

// The security scheme's hook of an operation. A scheme with no hook, or a choice between schemes (which no operation
// offers yet), fails at start rather than letting a request through unchecked.
const authentication = (securitySchemes: RoutesPluginOptions['securitySchemes']): StepFor => (route) => {
  const [scheme, ...alternatives] = route.security
  if (scheme === undefined) return undefined
  const authenticate = securitySchemes[scheme]
  if (authenticate === undefined || alternatives.length > 0) {
    throw new Error(`${route.operationId}: no hook enforces the security scheme(s) ${route.security.join(', ')} of the contract`)
  }
  return { onRequest: [authenticate] }
}

const roleGuard: StepFor = (route) => route.roles.length === 0 ? undefined : { onRequest: [requireRole(route.roles)] }

/**
 * How a request of an operation runs: every step below that applies to its route, in this order, each a
 * capability's, made once per route from what the operation declares in the contract (docs/contract.md lists
 * each operation's). Before them, on every request (a contract route's or not), the service's own `onRequest`
 * hooks: the request id and nosniff (src/service.ts), the connection's tracking for shutdown, CORS.
 *
 *  0. deprecation            onSend      `deprecated: true`: Deprecation, Sunset and Link on every response, calls counted
 *  1. load shedding          onRequest   503 under overload, unless `x-load-shedding: exempt`
 *  2. limits by address      onRequest   RateLimit-Policy; the `x-rate-limits` keyed by the client address (429)
 *  3. authentication         onRequest   the operation's security scheme (401)
 *  4. role                   onRequest   `x-roles` (403)
 *     (Fastify)                          body parsing (400, 413, 415), the generated validators (400)
 *  5. idempotency            preHandler  the `Idempotency-Key` claim, or the replay (409, 422); onError frees it
 *  6. limits by caller       preHandler  the `x-rate-limits` keyed by email or user (429); onSend counts a failed sign-in
 *     (handler)                          then serialization with the contract's response schema
 *  7. response contract      onSend      the response checked against the contract (CONTRACT_STRICT_RESPONSES)
 *  8. metrics                onResponse  the request's duration, by operation and status (OPS_PORT)
 *
 * A capability adds hooks to no route itself; a route that a capability does not apply to runs none of its code.
 */
function pipeline (app: FastifyInstance, options: RoutesPluginOptions, responseContract: StepFor): ReadonlyArray<readonly [string, StepFor]> {
  return [
    ['deprecation', deprecationStep(app.metrics)],
    ['load shedding', app.shedding],
    ['limits by address', app.rateLimits.byAddress],
    ['authentication', authentication(options.securitySchemes)],
    ['role', roleGuard],
    ['idempotency', app.idempotency],
    ['limits by caller', app.rateLimits.byCaller],
    ['response contract', responseContract],
    ['metrics', app.requestMetrics]
  ]
}

/** The route's hooks, phase by phase, from the steps that apply to it, in the pipeline's order. */
const composedHooks = (steps: readonly RouteStep[]) => ({
  onRequest: steps.flatMap((step) => step.onRequest ?? []),
  preHandler: steps.flatMap((step) => step.preHandler ?? []),
  onSend: steps.flatMap((step) => step.onSend ?? []),
  onResponse: steps.flatMap((step) => step.onResponse ?? []),
  onError: steps.flatMap((step) => step.onError ?? [])
})

/** One route per operation of the contract, each with its pipeline. */
async function routesPlugin (app: FastifyInstance, options: RoutesPluginOptions): Promise<void> {
  // Both compilers are the contract's, set in this context so that a host's own routes keep theirs. The route
  // schemas refer to the contract's component schemas by $id: the generated validators were built with them, and
  // contractSerializer resolves them itself, so none is added to Fastify.
  app.setValidatorCompiler(generatedValidator)
  app.setSerializerCompiler(({ schema }) => contractSerializer(schema))
  // Loaded only in strict mode: a production start never loads the response validators.
  const enforceResponseContract = options.strictResponses ? (await import('../response-contract.js')).enforceResponseContract : undefined
  const responseContract: StepFor = (route) => enforceResponseContract === undefined ? undefined : { onSend: [enforceResponseContract(route)] }
  const steps = pipeline(app, options, responseContract)
  const register = (context: FastifyInstance, route: RouteDefinition): void => {
    const applied = steps.flatMap(([name, stepFor]) => {
      const step = stepFor(route)
      return step === undefined ? [] : [{ name, step }]
    })
    context.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      ...composedHooks(applied.map(({ step }) => step)),
      handler: options.handlers[route.operationId] as RouteHandlerMethod,
      config: { operationId: route.operationId, pipeline: applied.map(({ name }) => name) },
      // Only what the contract declares is served, in a host server too: no HEAD twin of a GET.
      exposeHeadRoute: false
    })
  }
  for (const route of routes) if (route.schema.body !== undefined) register(app, route)
  // A JSON body sent to an operation that declares none (a logout, a delete) is read, within the body limit, and
  // ignored, as HTTP asks of content that means nothing to the request: never a 400 the operation does not declare.
  // In a context of their own, so that the routes that take a body pay nothing for it.
  await app.register(async (withoutBody) => {
    withoutBody.removeContentTypeParser('application/json')
    withoutBody.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, _body, done) => { done(null, undefined) })
    for (const route of routes) if (route.schema.body === undefined) register(withoutBody, route)
  })
}

// Encapsulated (the compilers above are this context's), yet named, so that the capabilities it reads are declared.
export default fp(routesPlugin, {
  name: 'routes',
  encapsulate: true,
  dependencies: ['load-shedding', 'rate-limits', 'auth', 'idempotency', 'metrics']
})
