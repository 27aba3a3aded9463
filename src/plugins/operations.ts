import { timingSafeEqual } from 'node:crypto'
import Fastify, { type FastifyInstance, type onRequestHookHandler, type RouteHandlerMethod } from 'fastify'
import fp from 'fastify-plugin'
import { routes } from '../../generated/operations/routes.js'
import { schemas } from '../../generated/operations/schemas.js'
import { operationValidators } from '../../generated/operations/validators.js'
import { connectionLimits } from '../connection-limits.js'
import { unauthorized } from '../errors.js'
import { operationsHandlers } from '../handlers/operations.js'
import { subscriberName, type Subscription } from '../webhooks/subscriptions.js'
import errorsPlugin, { handleClientError, handleError } from './errors.js'
import { contractSerializers } from '../serialized.js'
import { generatedValidators } from './routes.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The configured webhook subscribers' ids, by name (`subscriberName`); on the operations server. */
    webhookSubscribers: ReadonlyMap<string, string>
  }
}

interface OperationsPluginOptions {
  host: string
  port: number
  /** Required as a bearer token on every operation, when set. */
  token: string | undefined
  subscriptions: readonly Subscription[]
  /** How long a request's headers and body may take to arrive, as on the public port. */
  requestTimeoutMs: number
}

const operationsSerializer = contractSerializers(schemas)

const BEARER = /^Bearer[ ]+(\S+)$/i
// Its largest request is a redelivery of 1 000 event ids (about 40 KB).
const BODY_LIMIT_BYTES = 64 * 1024

/** The `opsToken` scheme of ops/openapi.yaml: the bearer token must be OPS_TOKEN, when it is set. */
function opsToken (token: string | undefined): onRequestHookHandler {
  const expected = Buffer.from(token ?? '')
  return (request, _reply, done) => {
    if (token === undefined) return done()
    const presented = BEARER.exec(request.headers.authorization ?? '')?.[1]
    if (presented === undefined) return done(unauthorized('AUTHENTICATION_REQUIRED', 'The operations token is required.'))
    const given = Buffer.from(presented)
    done(given.length === expected.length && timingSafeEqual(given, expected) ? undefined : unauthorized('INVALID_TOKEN', 'The operations token is wrong.'))
  }
}

/**
 * The operations API (ops/openapi.yaml) on a server of its own, on OPS_PORT, so that what it tells never reaches
 * the public API's port. It starts listening when the app is ready and stops when the app closes.
 */
async function operationsPlugin (app: FastifyInstance, options: OperationsPluginOptions): Promise<void> {
  const server = Fastify({
    loggerInstance: app.log.child({ api: 'operations' }),
    exposeHeadRoutes: false,
    bodyLimit: BODY_LIMIT_BYTES,
    ...connectionLimits(options.requestTimeoutMs),
    frameworkErrors: handleError,
    clientErrorHandler: handleClientError
  })
  server.decorate('metrics', app.metrics)
  server.decorate('store', app.store)
  server.decorate('webhookSubscribers', new Map(options.subscriptions.map((subscription) => [subscriberName(subscription.url), subscription.id])))
  await server.register(errorsPlugin)
  server.setValidatorCompiler(generatedValidators(routes, operationValidators))
  server.setSerializerCompiler(({ schema }) => operationsSerializer(schema))
  // Every operation is under the contract's one requirement, opsToken (test/contract.test.ts holds it to that).
  const authenticate = opsToken(options.token)
  for (const route of routes) {
    server.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      onRequest: [authenticate],
      // Each handler is typed by its operation; the route table, by every operation at once.
      handler: operationsHandlers[route.operationId] as RouteHandlerMethod
    })
  }
  app.addHook('onReady', async () => {
    await server.listen({
      host: options.host,
      port: options.port,
      listenTextResolver: (address) => `Operations API at ${address}`
    })
  })
  app.addHook('onClose', async () => { await server.close() })
}

export default fp(operationsPlugin, { name: 'operations', dependencies: ['metrics', 'store'] })
