import type { FastifyInstance } from 'fastify'
import { contractDocument } from '../../generated/document.js'
import type { HashingProcess } from '../auth/hashing-process.js'
import type { AppConfig } from '../config/config.js'
import { handlers } from '../handlers/index.js'
import routesPlugin from '../pipeline/index.js'
import authPlugin from '../plugins/app/auth.js'
import clientAddressPlugin from '../plugins/app/client-address.js'
import errorsPlugin from '../plugins/app/errors.js'
import eventsPlugin, { type Subscribers } from '../plugins/app/events.js'
import metricsPlugin from '../plugins/app/metrics.js'
import operationsPlugin from '../plugins/app/operations.js'
import seedPlugin from '../plugins/app/seed.js'
import shutdownPlugin from '../plugins/app/shutdown.js'
import sandboxesPlugin, { type SandboxRouting } from '../plugins/app/sandboxes.js'
import storePlugin from '../plugins/app/store.js'
import webhooksPlugin from '../plugins/app/webhooks.js'
import corsPlugin from '../plugins/external/cors.js'
import docsPlugin, { apiServers } from '../plugins/external/docs.js'
import tracingPlugin, { type Tracing } from '../plugins/external/tracing.js'
import underPressurePlugin from '../plugins/external/under-pressure.js'
import type { AppStore } from '../store/sandboxes.js'

export interface ItemsServiceOptions {
  /** The whole configuration (loadConfig() reads it from the environment). */
  config: AppConfig
  /** Where data is kept; when left out, the store the configuration names (STORE). */
  store?: AppStore | undefined
  /** Event handlers to subscribe before the first request, by channel. */
  subscribers?: Subscribers | undefined
  /** See BuildAppOptions.hashingProcess. */
  hashingProcess?: HashingProcess | undefined
  /** See BuildAppOptions.tracing. */
  tracing?: Tracing | undefined
  /**
   * How the server routes requests to sandboxes, when the configuration has them on: buildApp makes it with the
   * server. Without it, sandboxes are off (a host's own server does not route by it).
   */
  sandboxRouting?: SandboxRouting | undefined
}

/**
 * The whole service as a Fastify plugin: its routes, with the validators generated from the contract, and every
 * plugin they need, in the order a request meets them. Registered as it is, it keeps to its own encapsulation
 * context (a host server's other routes keep their own validators, error handler and hooks); buildApp registers it
 * through fastify-plugin, so that its decorators (store, events, ...) are the app's. What only a server can set
 * (the logger, request ids, timeouts, trustProxy, the client error handler) is buildApp's, or the host's.
 */
export async function itemsService (app: FastifyInstance, options: ItemsServiceOptions): Promise<void> {
  const { config } = options
  // On every response, errors included: the id to quote in a report, and no content sniffing of the JSON by a
  // browser (the docs get the rest of helmet's headers in their own plugin).
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id).header('x-content-type-options', 'nosniff')
    done()
  })

  await app.register(tracingPlugin, { tracing: options.tracing })
  await app.register(errorsPlugin)
  await app.register(clientAddressPlugin, { ipv6PrefixLength: config.clientIpv6PrefixLength })
  await app.register(corsPlugin, { origins: config.corsOrigins })
  await app.register(metricsPlugin, { exposed: config.operations !== undefined })
  await app.register(shutdownPlugin, config)
  await app.register(underPressurePlugin)
  await app.register(storePlugin, {
    config: config.store,
    timeCommands: config.operations !== undefined,
    sizing: {
      production: config.environment === 'production',
      maxHeapUsedBytes: config.maxHeapUsedBytes,
      sessionsPerAccount: config.maxSessionsPerUser,
      sandboxes: config.sandboxes,
      rateLimited: config.rateLimits !== null,
      subscribers: config.webhooks.subscriptions.length
    },
    ...(options.store === undefined ? {} : { store: options.store })
  })
  const { maxItemsPerUser, idempotencyKeys } = config.store
  await app.register(sandboxesPlugin, {
    routing: options.sandboxRouting ?? null,
    bounds: config.sandboxes,
    store: { maxItemsPerContributor: maxItemsPerUser, idempotencyKeys },
    deliveries: config.webhooks
  })
  await app.register(eventsPlugin, {
    subscribers: options.subscribers,
    webhookChannels: new Set(config.webhooks.subscriptions.flatMap((subscription) => subscription.channels))
  })
  await app.register(webhooksPlugin, { config: config.webhooks })
  await app.register(authPlugin, { ...config, hashingProcess: options.hashingProcess })
  await app.register(seedPlugin, { file: config.seedFile })
  await app.register(docsPlugin, { document: contractDocument, servers: apiServers({ sandboxes: config.sandboxes !== undefined }) })
  await app.register(routesPlugin, { handlers, config, metricsExposed: config.operations !== undefined })
  if (config.operations !== undefined) {
    await app.register(operationsPlugin, { ...config.operations, subscriptions: config.webhooks.subscriptions, requestTimeoutMs: config.requestTimeoutMs })
  }
}
