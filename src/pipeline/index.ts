import type { ValidateFunction } from 'ajv'
import type { FastifyInstance, RouteHandlerMethod } from 'fastify'
import fp from 'fastify-plugin'
import { routes } from '../../generated/routes.js'
import { operationValidators } from '../../generated/validators.js'
import type { AppConfig } from '../config/config.js'
import type { Handlers } from '../handlers/handler.js'
import { contractSerializer, type ContractSerializer } from '../domain/serialized.js'
import { authentication, bearerAuth } from './authentication.js'
import { deprecationStep } from './deprecation.js'
import { idempotency } from './idempotency.js'
import { loadShedding } from './load-shedding.js'
import { rateLimits } from './rate-limits.js'
import { requestMetrics } from './request-metrics.js'
import { roleGuard } from './role.js'
import type { ContractRoute, RouteStep, StepFor } from './step.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The operation of the contract that the route serves (of the public API, or of the operations API). */
    operationId?: string
    /** The names of the steps of the route's pipeline, in the order they run. */
    pipeline?: readonly string[]
  }
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

/** A contract's steps, each by the name its routes list it under (`config.pipeline`), in the order they run. */
export type Pipeline<Route extends ContractRoute> = ReadonlyArray<readonly [name: string, stepFor: StepFor<Route>]>

/** The route's hooks, phase by phase, from the steps that apply to it, in the pipeline's order. */
const composedHooks = (steps: readonly RouteStep[]) => ({
  onRequest: steps.flatMap((step) => step.onRequest ?? []),
  preHandler: steps.flatMap((step) => step.preHandler ?? []),
  onSend: steps.flatMap((step) => step.onSend ?? []),
  onResponse: steps.flatMap((step) => step.onResponse ?? []),
  onError: steps.flatMap((step) => step.onError ?? [])
})

interface ContractRoutes<Route extends ContractRoute & { readonly operationId: Id }, Id extends string> {
  readonly routes: readonly Route[]
  /** The contract's generated request validators, by operation. */
  readonly validators: ValidatorCompiler
  /** The contract's response serializers, by schema. */
  readonly serializer: ContractSerializer
  /** One handler per operation; each is typed by its operation, the table by every operation at once. */
  readonly handlers: { readonly [Key in Id]: unknown }
  readonly pipeline: Pipeline<Route>
}

/**
 * One route per operation of a contract (the public API's here, the operations API's on its own server), each
 * with its pipeline: the steps that apply to it, in the pipeline's order, their hooks composed phase by phase.
 * The compilers are the contract's, set in `context`, so that a host's own routes keep theirs. The route schemas
 * refer to the contract's component schemas by $id: the generated validators were built with them, and the
 * serializer resolves them itself, so none is added to Fastify.
 */
export async function registerContractRoutes<Route extends ContractRoute & { readonly operationId: Id }, Id extends string> (context: FastifyInstance, contract: ContractRoutes<Route, Id>): Promise<void> {
  context.setValidatorCompiler(contract.validators)
  context.setSerializerCompiler(({ schema }) => contract.serializer(schema))
  // Only JSON bodies are accepted, as the contracts declare; anything else is a 415 rather than a string that fails
  // validation.
  context.removeContentTypeParser('text/plain')
  const register = (routeContext: FastifyInstance, route: Route): void => {
    const applied = contract.pipeline.flatMap(([name, stepFor]) => {
      const step = stepFor(route)
      return step === undefined ? [] : [{ name, step }]
    })
    routeContext.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      ...composedHooks(applied.map(({ step }) => step)),
      handler: contract.handlers[route.operationId] as RouteHandlerMethod,
      config: { operationId: route.operationId, pipeline: applied.map(({ name }) => name) },
      // Only what the contract declares is served, in a host server too: no HEAD twin of a GET.
      exposeHeadRoute: false
    })
  }
  for (const route of contract.routes) if (route.schema.body !== undefined) register(context, route)
  // A JSON body sent to an operation that declares none (a logout, a delete) is read, within the body limit, and
  // ignored, as HTTP asks of content that means nothing to the request: never a 400 the operation does not declare.
  // In a context of their own, so that the routes that take a body pay nothing for it.
  await context.register(async (withoutBody) => {
    withoutBody.removeContentTypeParser('application/json')
    withoutBody.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, _body, done) => { done(null, undefined) })
    for (const route of contract.routes) if (route.schema.body === undefined) register(withoutBody, route)
  })
}

interface RoutesPluginOptions {
  handlers: Handlers
  config: Pick<AppConfig, 'jwt' | 'rateLimits' | 'maxEventLoopDelayMs' | 'maxHeapUsedBytes' | 'strictResponses'>
  /** Whether anyone reads the metrics (OPS_PORT is set): only then is each request timed. */
  metricsExposed: boolean
}

/**
 * How a request of an operation of the public API runs: every step below that applies to its route, in this
 * order, each a capability's, made once per route from what the operation declares in the contract (docs/contract.md
 * lists each operation's). Before them, on every request (a contract route's or not), the service's own `onRequest`
 * hooks, which no step can stand for, since they serve the requests no route has (a 404, a CORS preflight) too:
 * the request's span (src/plugins/external/tracing.ts), the request id and nosniff (src/app/service.ts), the
 * connection's tracking for shutdown (src/plugins/app/shutdown.ts), CORS (src/plugins/external/cors.ts).
 *
 *  0. deprecation            onSend      `deprecated: true`: Deprecation, Sunset and Link on every response, calls counted
 *  1. load shedding          onRequest   503 under overload, unless `x-load-shedding: exempt`
 *  2. limits by address      onRequest   RateLimit-Policy; the `x-rate-limits` keyed by the client address (429)
 *  3. authentication         onRequest   the operation's security scheme (401)
 *  4. role                   onRequest   `x-roles` (403)
 *     (Fastify)                          body parsing (400, 413, 415), the generated validators (400)
 *  5. limits by caller       preHandler  the `x-rate-limits` keyed by email or user (429), the item writes' handed to
 *                                        the store, which counts them in the write's own step; onSend counts a failed sign-in
 *  6. idempotency            preHandler  the `Idempotency-Key` and the request's digest, which the store records the create
 *                                        under in the step that makes it, or answers what the key recorded (a replay, 422)
 *     (handler)                          then serialization with the contract's response schema
 *  7. response contract      onSend      the response checked against the contract (CONTRACT_STRICT_RESPONSES)
 *  8. metrics                onResponse  the request's duration, by operation and status (OPS_PORT)
 *
 * A capability adds hooks to no route itself; a route that a capability does not apply to runs none of its code.
 * Each step is made here from what it needs: the app's metrics and token signer, the configuration; the store is
 * the request's (`request.store`).
 */
async function publicPipeline (app: FastifyInstance, options: RoutesPluginOptions): Promise<Pipeline<typeof routes[number]>> {
  const { config } = options
  const limits = rateLimits({ limits: config.rateLimits, metrics: app.metrics })
  // Loaded only in strict mode: a production start never loads the response validators.
  const enforceResponseContract = config.strictResponses ? (await import('./response-contract.js')).enforceResponseContract : undefined
  return [
    ['deprecation', deprecationStep(app.metrics)],
    // The readings taken once, as functions: looking them up on the app (an object of many properties, a context
    // below the one that decorated it) would be paid on every request.
    ['load shedding', loadShedding({ readings: { eventLoopDelayMs: app.eventLoopDelayMs, memoryUsage: app.memoryUsage }, limits: config, metrics: app.metrics, log: app.log })],
    ['limits by address', limits.byAddress],
    ['authentication', authentication({
      bearerAuth: bearerAuth({ jwt: app.jwt, verifyAccessToken: app.verifyAccessToken, metrics: app.metrics, accessTokenTtlSeconds: config.jwt.accessTokenTtlSeconds })
    })],
    ['role', roleGuard],
    ['limits by caller', limits.byCaller],
    ['idempotency', idempotency],
    ['response contract', (route) => enforceResponseContract === undefined ? undefined : { onSend: [enforceResponseContract(route)] }],
    ['metrics', requestMetrics(app.metrics, options.metricsExposed)]
  ]
}

/** The public API's routes, each with its pipeline. */
async function routesPlugin (app: FastifyInstance, options: RoutesPluginOptions): Promise<void> {
  // The request state the steps keep, declared for Fastify's request shape: what each limit left, the limit a write
  // counts against, the request's Idempotency-Key.
  app.decorateRequest('rateLimitStatus', null)
  app.decorateRequest('writeLimit', null)
  app.decorateRequest('idempotencyKey', null)
  await registerContractRoutes(app, { routes, validators: generatedValidator, serializer: contractSerializer, handlers: options.handlers, pipeline: await publicPipeline(app, options) })
}

// Encapsulated (the compilers are this context's), yet named, so that the plugins whose decorators it reads are declared.
export default fp(routesPlugin, {
  name: 'routes',
  encapsulate: true,
  dependencies: ['store', 'metrics', 'auth', 'under-pressure', 'client-address']
})
