import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { getHeapStatistics } from 'node:v8'
import fastifyUnderPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import type { AppConfig } from '../config.js'
import { type ApiError, serviceUnavailable } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    lifecycle: {
      draining: boolean
      /** Once draining: when the connections still open are closed, whatever they are doing (ms since the epoch). */
      shutdownDeadline: number
    }
  }
}

type HealthPluginOptions = Pick<AppConfig, 'maxEventLoopDelayMs' | 'maxHeapUsedBytes' | 'shutdownTimeoutMs'>

// V8's heap limit counts the young generation too, which a small --max-old-space-size makes a large part of it
// (on Node 24, 207 of the 335 MB that --max-old-space-size=128 gives): set MAX_HEAP_USED for such a heap.
const HEAP_SHARE_BEFORE_SHEDDING = 0.6
// Response buffers and sockets live outside the heap, and code and the runtime take a fixed share: the resident
// size may reach twice the heap limit and this much more.
const RSS_ALLOWANCE_BYTES = 256 * 1024 * 1024
const MEMORY_SAMPLE_INTERVAL_MS = 250
// What frees memory or ends access is served however loaded the service is: shedding it would keep the service
// short of memory, or a stolen session open, for as long as the overload lasts.
const NEVER_SHED: ReadonlySet<RouteOperationId> = new Set(['deleteItem', 'logoutUser'])
const RETRY_AFTER_SECONDS = 5
// Once shutdown begins, kept-alive connections stay open this long (at most a quarter of SHUTDOWN_TIMEOUT), so
// that a request already on its way over one is answered, with Connection: close, rather than met by a reset.
const DRAIN_GRACE_MS = 1000
const DRAIN_POLL_MS = 10
// The share of SHUTDOWN_TIMEOUT after which the connections still open are closed, whatever they are doing, so
// that the process ends by itself (exit 0) before close-with-grace gives up on it.
const SHUTDOWN_SHARE_BEFORE_FORCE = 0.8

/**
 * Readiness turns false once shutdown begins; under overload requests are shed with a 503, but item deletes and
 * logouts.
 *
 * Shutdown drains: every response still to be written, or written while draining, says Connection: close, so no
 * client sends another request over a connection about to close; kept-alive connections get a short grace for
 * requests already on their way; then the connections with no request in progress (idle, or a client stuck in
 * its headers) are closed, the others when their response is written, and any left at 80 % of SHUTDOWN_TIMEOUT.
 */
async function healthPlugin (app: FastifyInstance, options: HealthPluginOptions): Promise<void> {
  app.decorate('lifecycle', { draining: false, shutdownDeadline: Infinity })
  const connections = new Set<Socket>()
  // The response of each connection's latest request: the only way to tell, at shutdown, which ones are in flight.
  const responses = new WeakMap<Socket, ServerResponse>()
  app.server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  // Memory limits derived from the heap V8 may grow to (--max-old-space-size): past them the service stops taking
  // what would grow it, well before V8 gives up, while what only reads goes on.
  const heapLimit = getHeapStatistics().heap_size_limit
  const maxHeapUsedBytes = options.maxHeapUsedBytes ?? Math.round(heapLimit * HEAP_SHARE_BEFORE_SHEDDING)
  const maxRssBytes = 2 * heapLimit + RSS_ALLOWANCE_BYTES
  // Under-pressure only samples here (no limits given, so it adds no hook of its own, whose reading of
  // request.routeOptions built an object on every request); the hook below sheds from its samples: every request
  // while the event loop lags, only writes while memory is short.
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
  app.addHook('onRequest', (request, reply, done) => {
    responses.set(request.raw.socket, reply.raw)
    const refusal = shed(request.method)
    // Read only when shedding: routeOptions builds an object on every read.
    const operationId = refusal === undefined ? undefined : request.routeOptions.config.operationId
    done(operationId !== undefined && NEVER_SHED.has(operationId) ? undefined : refusal)
  })
  // The response of the request in progress on a connection, if any: one not written yet (this service writes
  // each response at once, headers and body).
  const unwritten = (socket: Socket): ServerResponse | undefined => {
    const response = responses.get(socket)
    return response?.headersSent === false ? response : undefined
  }
  let forceClose: NodeJS.Timeout | undefined
  app.addHook('preClose', async () => {
    app.lifecycle.draining = true
    const forceCloseAfterMs = options.shutdownTimeoutMs * SHUTDOWN_SHARE_BEFORE_FORCE
    app.lifecycle.shutdownDeadline = Date.now() + forceCloseAfterMs
    forceClose = setTimeout(() => { for (const socket of connections) socket.destroy() }, forceCloseAfterMs).unref()
    // Fastify adds Connection: close to the responses of requests that arrive from now on.
    for (const socket of connections) unwritten(socket)?.setHeader('connection', 'close')
    const graceEnds = Date.now() + Math.min(DRAIN_GRACE_MS, options.shutdownTimeoutMs / 4)
    while (connections.size > 0 && Date.now() < graceEnds) await sleep(DRAIN_POLL_MS)
    for (const socket of connections) {
      if (unwritten(socket) === undefined) socket.destroy()
    }
  })
  app.addHook('onClose', async () => { clearTimeout(forceClose) })
}

export default fp(healthPlugin, { name: 'health' })
