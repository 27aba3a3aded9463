import { getHeapStatistics } from 'node:v8'
import fastifyUnderPressure, { TYPE_EVENT_LOOP_DELAY } from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { AppConfig } from '../config.js'
import { serviceUnavailable } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    lifecycle: { draining: boolean }
  }
}

type HealthPluginOptions = Pick<AppConfig, 'maxEventLoopDelayMs' | 'maxHeapUsedBytes'>

// V8's heap limit counts the young generation too, which a small --max-old-space-size makes a large part of it
// (on Node 24, 207 of the 335 MB that --max-old-space-size=128 gives): set MAX_HEAP_USED for such a heap.
const HEAP_SHARE_BEFORE_SHEDDING = 0.6
// Response buffers and sockets live outside the heap, and code and the runtime take a fixed share: the resident
// size may reach twice the heap limit and this much more.
const RSS_ALLOWANCE_BYTES = 256 * 1024 * 1024
const MEMORY_SAMPLE_INTERVAL_MS = 250
const RETRY_AFTER_SECONDS = 5

/** Readiness turns false once shutdown begins; under overload every request is shed with a 503. */
async function healthPlugin (app: FastifyInstance, options: HealthPluginOptions): Promise<void> {
  app.decorate('lifecycle', { draining: false })
  // server.close() only ends the keep-alive connections idle at that moment; those of in-flight requests
  // would linger until their keep-alive timeout, so keep ending them as they become idle while draining.
  let reaper: NodeJS.Timeout | undefined
  app.addHook('preClose', async () => {
    app.lifecycle.draining = true
    reaper = setInterval(() => { app.server.closeIdleConnections() }, 50).unref()
  })
  app.addHook('onClose', async () => { clearInterval(reaper) })
  // Memory limits derived from the heap V8 may grow to (--max-old-space-size): past them the service stops taking
  // what would grow it, well before V8 gives up, while what only reads goes on.
  const heapLimit = getHeapStatistics().heap_size_limit
  await app.register(fastifyUnderPressure, {
    maxEventLoopDelay: options.maxEventLoopDelayMs,
    maxHeapUsedBytes: options.maxHeapUsedBytes ?? Math.round(heapLimit * HEAP_SHARE_BEFORE_SHEDDING),
    maxRssBytes: 2 * heapLimit + RSS_ALLOWANCE_BYTES,
    sampleInterval: MEMORY_SAMPLE_INTERVAL_MS,
    // Under-pressure calls this instead of answering 503 itself: every request is shed while the event loop lags,
    // only writes while memory is short.
    pressureHandler: async (request, _reply, type) => {
      if (type === TYPE_EVENT_LOOP_DELAY) throw serviceUnavailable('The service is overloaded; try again shortly.', RETRY_AFTER_SECONDS)
      if (request.method !== 'GET') throw serviceUnavailable('The service is short of memory; try again later.', RETRY_AFTER_SECONDS)
    }
  })
}

export default fp(healthPlugin, { name: 'health' })
