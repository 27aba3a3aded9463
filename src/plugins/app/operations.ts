import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { contractDocument } from '../../../generated/operations/document.js'
import { routes } from '../../../generated/operations/routes.js'
import { schemas } from '../../../generated/operations/schemas.js'
import { operationValidators } from '../../../generated/operations/validators.js'
import { connectionLimits } from '../../config/connection-limits.js'
import { InvalidRequestError, ListenError } from '../../errors.js'
import { operationsHandlers } from '../../handlers/operations.js'
import { authentication, opsToken } from '../../pipeline/authentication.js'
import { generatedValidators, registerContractRoutes } from '../../pipeline/index.js'
import { contractSerializers } from '../../domain/serialized.js'
import { nestedDeeperThan } from '../../runtime/json-text.js'
import { randomUuid } from '../../runtime/uuid.js'
import { subscriberName, type Subscription } from '../../webhooks/subscriptions.js'
import docsPlugin from '../external/docs.js'
import errorsPlugin, { contractedAnswers } from './errors.js'

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

// Its largest requests are a redelivery of 1 000 event ids (about 40 KB) and a sandbox's fixtures.
const BODY_LIMIT_BYTES = 64 * 1024

// Its deepest request is a sandbox's fixtures (an object, its lists, their entries): a body nested deeper is none
// of its requests, and is refused before anything (a fixture kept as JSON on Redis) recurses over it.
const BODY_LEVELS = 16

/**
 * The operations API (ops/openapi.yaml) on a server of its own, on OPS_PORT, so that what it tells never reaches
 * the public API's port. It starts listening when the app is ready and stops when the app closes.
 */
async function operationsPlugin (app: FastifyInstance, options: OperationsPluginOptions): Promise<void> {
  const server = Fastify({
    loggerInstance: app.log.child({ api: 'operations' }),
    // Unique across instances and restarts, as the public API's: an audit line names its request alone.
    genReqId: () => randomUuid(),
    bodyLimit: BODY_LIMIT_BYTES,
    ...connectionLimits(options.requestTimeoutMs),
    ...contractedAnswers
  })
  server.decorate('metrics', app.metrics)
  server.decorate('store', app.store)
  server.decorate('events', app.events)
  server.decorate('sandboxes', app.sandboxes)
  server.decorate('journalWaits', app.journalWaits)
  server.decorate('prepareSeed', app.prepareSeed)
  server.decorate('keptSeed', app.keptSeed)
  server.decorate('seedStore', app.seedStore)
  server.decorate('webhookSubscribers', new Map(options.subscriptions.map((subscription) => [subscriberName(subscription.url), subscription.id])))
  await server.register(errorsPlugin)
  const parseJson = server.getDefaultJsonParser('error', 'error')
  server.removeContentTypeParser('application/json')
  server.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body.toString()
    if (nestedDeeperThan(text, BODY_LEVELS)) {
      done(new InvalidRequestError([{ field: 'body', issue: `is nested deeper than ${BODY_LEVELS} levels` }]), undefined)
      return
    }
    parseJson(request, text, done)
  })
  const guard = opsToken(options.token)
  // Every operation is under the contract's one requirement, opsToken (test/contract/document.test.ts holds it to that);
  // none is deprecated or limited, and none is shed, so that an overloaded instance can still be looked into.
  await registerContractRoutes(server, {
    routes,
    validators: generatedValidators(routes, operationValidators),
    serializer: operationsSerializer,
    handlers: operationsHandlers,
    pipeline: [['authentication', authentication({ opsToken: guard })]]
  })
  // Its contract and Swagger UI, as the public API serves its own, under the same token as its operations.
  await server.register(docsPlugin, { document: contractDocument, servers: [{ url: '/', description: 'The operations API of the instance serving this document.' }], guard })
  app.addHook('onReady', async () => {
    try {
      await server.listen({
        host: options.host,
        port: options.port,
        listenTextResolver: (address) => `Operations API at ${address}`
      })
    } catch (error) {
      throw new ListenError(`Cannot listen on ${options.host}:${options.port} (OPS_HOST:OPS_PORT, the operations API): ${(error as Error).message}`, { cause: error })
    }
  })
  // A request in flight once the app drains (a wait on a journal, which closing answers at once) is answered with
  // Connection: close: its kept-alive connection, busy when the server closes its idle ones, would otherwise hold
  // the close until the client let it go.
  server.addHook('onSend', async (_request, reply, payload) => {
    if (app.lifecycle.draining) reply.header('connection', 'close')
    return payload
  })
  app.addHook('onClose', async () => { await server.close() })
}

export default fp(operationsPlugin, { name: 'operations', dependencies: ['metrics', 'shutdown', 'store', 'events', 'sandboxes', 'seed'] })
