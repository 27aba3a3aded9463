import { getHeapStatistics } from 'node:v8'
import fastifyUnderPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import type { AppConfig } from '../config.js'
import { type ApiError, serviceUnavailable } from '../errors.js'

type LoadSheddingPluginOptions = Pick<AppConfig, 'maxEventLoopDelayMs' | 'maxHeapUsedBytes'>

// V8's heap limit counts the young generation too, which a small --max-old-space-size makes a large part of it
// (docs/operations.md): set MAX_HEAP_USED_MIB for such a heap.
const HEAP_SHARE_BEFORE_SHEDDING = 0.6
// Response buffers and sockets live outside the heap, and code and the runtime take a fixed share: the resident
// size may reach twice the heap limit and this much more.
const RSS_ALLOWANCE_BYTES = 256 * 1024 * 1024
const MEMORY_SAMPLE_INTERVAL_MS = 250
// What frees memory or ends access is served however loaded the service is: shedding it would keep the service
// short of memory, or a stolen session open, for as long as the overload lasts.
const NEVER_SHED: ReadonlySet<RouteOperationId> = new Set(['deleteItem', 'logoutUser'])
const RETRY_AFTER_SECONDS = 5

/**
 * Under overload, requests are shed with a 503, but item deletes and logouts: every request while the event loop
 * lags, only writes while memory is short (past limits derived from the heap V8 may grow to, well before V8 gives
 * up, while what only reads goes on).
 */
async function loadSheddingPlugin (app: FastifyInstance, options: LoadSheddingPluginOptions): Promise<void> {
  const heapLimit = getHeapStatistics().heap_size_limit
  const maxHeapUsedBytes = options.maxHeapUsedBytes ?? Math.round(heapLimit * HEAP_SHARE_BEFORE_SHEDDING)
  const maxRssBytes = 2 * heapLimit + RSS_ALLOWANCE_BYTES
  // Under-pressure only samples here (no limits given, so it adds no hook of its own, whose reading of
  // request.routeOptions built an object on every request); the hook below sheds from its samples.
  await app.register(fastifyUnderPressure, { sampleInterval: MEMORY_SAMPLE_INTERVAL_MS })
  const shed = (method: string): ApiError | undefined => {
    const { eventLoopDelay, heapUsed, rssBytes } = app.memoryUsage()
    if (options.maxEventLoopDelayMs > 0 && eventLoopDelay > options.maxEventLoopDelayMs) {
      return serviceUnavailable('The service is overloaded; try again shortly.', RETRY_AFTER_SECONDS)
    }
    if (method !== 'GET' && (heapUsed > maxHeapUsedBytes || rssBytes > maxRssBytes)) {
      return serviceUnavailable('The service is short of memory; try again later.', RETRY_AFTER_SECONDS)
    }
    return undefined
  }
  app.addHook('onRequest', (request, _reply, done) => {
    const refusal = shed(request.method)
    // Read only when shedding: routeOptions builds an object on every read.
    const operationId = refusal === undefined ? undefined : request.routeOptions.config.operationId
    done(operationId !== undefined && NEVER_SHED.has(operationId) ? undefined : refusal)
  })
}

export default fp(loadSheddingPlugin, { name: 'load-shedding' })
