// First, before Fastify and the rest load, in the server and in an embedder alike: see the module.
import '../runtime/tick-object-pin.js'
import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { DestinationStream } from 'pino'
import type { HashingProcess } from '../auth/hashing-process.js'
import { type AppSettings, withDefaults } from '../config/config.js'
import { connectionLimits } from '../config/connection-limits.js'
import { contractedAnswers } from '../plugins/app/errors.js'
import type { Subscribers } from '../plugins/app/events.js'
import { itemsService, type ItemsServiceOptions } from './service.js'
import type { Tracing } from '../plugins/external/tracing.js'
import type { AppStore } from '../store/sandboxes.js'
import { SandboxRouting } from '../plugins/app/sandboxes.js'
import { randomUuid } from '../runtime/uuid.js'
import { schemas } from '../../generated/schemas.js'

// How long the service may take to start (Fastify's default is 10 s a plugin).
const PLUGIN_TIMEOUT_MS = 120_000

// A caller's x-request-id is kept for tracing across services only when it cannot bloat or garble a log line: as
// the contract's events carry it (requestid).
const CALLER_REQUEST_ID = new RegExp(schemas.ItemEvent.properties.requestid.pattern)

// Censored in log lines as top-level keys and in a logged body ({ body: { password } }). The paths are spelt
// out: a wildcard path (`*.password`) makes pino run its redactor over every child logger's bindings, the request
// id of every request included.
const SECRET_LOG_KEYS = ['password', 'refreshToken', 'accessToken']
const REDACTED_LOG_PATHS = ['req.headers.authorization', ...SECRET_LOG_KEYS, ...SECRET_LOG_KEYS.map((key) => `body.${key}`)]

// The service, its decorators the app's own. Wrapped apart: fastify-plugin marks the function it is given, and
// itemsService itself must stay encapsulated for a host that registers it.
const itemsServiceOfTheApp = fp(async (app: FastifyInstance, options: ItemsServiceOptions) => { await itemsService(app, options) }, { name: 'items-service' })

export interface BuildAppOptions {
  /** Where data is kept; when left out, the store the configuration names (STORE). */
  store?: AppStore
  /** Event handlers to subscribe before the first request, by channel. */
  subscribers?: Subscribers
  /** Where the JSON log lines go; standard output when left out. */
  logStream?: DestinationStream
  /**
   * The process that hashes passwords. When left out, the app starts its own on the first sign-in and ends it when
   * it closes; one given is shared (apps of one process may share one, as the tests do) and left to its giver to end.
   */
  hashingProcess?: HashingProcess
  /** The process's tracer (src/app/tracing.ts), when tracing is on; it must have started before this module loaded. */
  tracing?: Tracing
}

/**
 * Builds the service, ready to `listen` or to `inject` requests into. `settings` is the configuration, whole
 * (`loadConfig()` reads it from the environment, as the server does) or in part (`{ logLevel: 'silent' }`): what it
 * leaves out keeps its default.
 */
export async function buildApp (settings: AppSettings = {}, options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const config = withDefaults(settings)
  const sandboxRouting = config.sandboxes === undefined ? undefined : new SandboxRouting()
  const app = Fastify({
    logger: {
      level: config.logLevel,
      redact: {
        paths: REDACTED_LOG_PATHS,
        censor: '[redacted]'
      },
      ...(options.logStream === undefined ? {} : { stream: options.logStream })
    },
    bodyLimit: config.bodyLimit,
    requestIdHeader: false,
    genReqId: (request) => {
      const callerId = request.headers['x-request-id']
      return typeof callerId === 'string' && CALLER_REQUEST_ID.test(callerId) ? callerId : randomUuid()
    },
    // The service loads as one plugin (itemsService), so its whole start counts against this: connecting to the
    // store and hashing a SEED_FILE's passwords (about 20 ms a user) included, or a start under valgrind.
    pluginTimeout: PLUGIN_TIMEOUT_MS,
    ...connectionLimits(config.requestTimeoutMs),
    // While closing, in-flight and kept-alive requests are still served; readiness reports the draining.
    return503OnClosing: false,
    ...contractedAnswers,
    // Behind a balancer, the client's address (request.ip, which rate limits key on) comes from X-Forwarded-For
    // only when the operator says the proxy is trusted.
    trustProxy: config.trustProxy,
    // A request to a sandbox is routed by the path after its base; the service's own pay nothing while they are off.
    ...(sandboxRouting === undefined ? {} : { rewriteUrl: sandboxRouting.rewriteUrl })
  })
  for (const warning of config.warnings) app.log.warn(warning)
  if (config.jwt.secretGenerated) {
    app.log.warn('JWT_SECRET is not set: signing with a random secret, so tokens will not survive a restart')
  }
  try {
    await app.register(itemsServiceOfTheApp, {
      config,
      store: options.store,
      subscribers: options.subscribers,
      hashingProcess: options.hashingProcess,
      tracing: options.tracing,
      sandboxRouting
    })
  } catch (error) {
    // What the plugins loaded so far hold (a store connection, the hashing process) is released.
    await app.close()
    throw error
  }
  return app
}
