import { monitorEventLoopDelay } from 'node:perf_hooks'
import { getHeapStatistics } from 'node:v8'
import fastifyUnderPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { Counter } from 'prom-client'
import type { AppConfig } from '../config.js'
import { serviceUnavailable } from '../errors.js'
import type { RouteStep, StepFor } from './route-steps.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The event loop's mean delay over the last sample, in milliseconds, measured since the app was ready. */
    eventLoopDelayMs: () => number
    /** The 503 under overload, a step of every operation the contract does not exempt (`x-load-shedding: exempt`). */
    shedding: StepFor
  }
}

type LoadSheddingPluginOptions = Pick<AppConfig, 'maxEventLoopDelayMs' | 'maxHeapUsedBytes'>

interface Overload {
  readonly reason: 'event_loop_delay' | 'heap_used' | 'rss'
  /** The figures that passed the limit, for the log line. */
  readonly measured: Record<string, number>
}

// V8's heap limit counts the young generation too, which a small --max-old-space-size makes a large part of it
// (docs/operations.md): set MAX_HEAP_USED_MIB for such a heap.
const HEAP_SHARE_BEFORE_SHEDDING = 0.6
// Response buffers and sockets live outside the heap, and code and the runtime take a fixed share: the resident
// size may reach twice the heap limit and this much more.
const RSS_ALLOWANCE_BYTES = 256 * 1024 * 1024
const SAMPLE_INTERVAL_MS = 250
const EVENT_LOOP_RESOLUTION_MS = 10
const RETRY_AFTER_SECONDS = 5

/**
 * Under overload, requests are shed with a 503, but those of the operations the contract exempts (what frees
 * memory or ends access, which shedding would keep short of memory, or a stolen session open, for as long as the
 * overload lasts): every request while the event loop lags, only writes while memory is short (past limits
 * derived from the heap V8 may grow to, well before V8 gives up, while what only reads goes on).
 */
async function loadSheddingPlugin (app: FastifyInstance, options: LoadSheddingPluginOptions): Promise<void> {
  const heapLimit = getHeapStatistics().heap_size_limit
  const maxHeapUsedBytes = options.maxHeapUsedBytes ?? Math.round(heapLimit * HEAP_SHARE_BEFORE_SHEDDING)
  const maxRssBytes = 2 * heapLimit + RSS_ALLOWANCE_BYTES
  // Under-pressure only samples memory here (no limits given, so it adds no hook of its own, whose reading of
  // request.routeOptions built an object on every request); the step below sheds from its samples.
  await app.register(fastifyUnderPressure, { sampleInterval: SAMPLE_INTERVAL_MS })
  // The event loop's delay counts from the moment the app is ready. Under-pressure's own measure starts at its
  // registration and cannot be started later or reset: it took in the start's synchronous work (compiling the
  // contract's schemas), which on a busy machine read as an overload and shed a fresh instance's first requests.
  const delay = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS })
  let eventLoopDelayMs = 0
  // Every interval has a reading: the histogram's timer falls due before the sampler's, even after the loop was
  // held past both.
  const sampleDelay = (): void => {
    eventLoopDelayMs = Math.max(0, delay.mean / 1e6 - EVENT_LOOP_RESOLUTION_MS)
    delay.reset()
  }
  let sampler: NodeJS.Timeout | undefined
  app.decorate('eventLoopDelayMs', () => eventLoopDelayMs)
  app.addHook('onReady', (done) => {
    delay.enable()
    sampler = setInterval(sampleDelay, SAMPLE_INTERVAL_MS).unref()
    done()
  })
  app.addHook('onClose', (_app, done) => {
    clearInterval(sampler)
    delay.disable()
    done()
  })
  const shedCount = new Counter<'reason'>({
    name: 'items_service_shed_total',
    help: 'Requests refused with 503 under overload, by the limit passed: event_loop_delay, heap_used or rss.',
    labelNames: ['reason'],
    registers: [app.metrics]
  })
  // What was past its limit at the last request; undefined while nothing is.
  let episode: Overload | undefined
  const overload = (): Overload | undefined => {
    const { heapUsed, rssBytes } = app.memoryUsage()
    if (options.maxEventLoopDelayMs > 0 && eventLoopDelayMs > options.maxEventLoopDelayMs) {
      return { reason: 'event_loop_delay', measured: { eventLoopDelayMs, maxEventLoopDelayMs: options.maxEventLoopDelayMs } }
    }
    if (heapUsed > maxHeapUsedBytes) return { reason: 'heap_used', measured: { heapUsedBytes: heapUsed, maxHeapUsedBytes } }
    if (rssBytes > maxRssBytes) return { reason: 'rss', measured: { rssBytes, maxRssBytes } }
    return undefined
  }
  const shed: RouteStep = {
    onRequest: [(request, _reply, done) => {
      const now = overload()
      // One line when an overload begins, with the figure past its limit, and one when it ends, however many
      // requests it sheds in between.
      if (now?.reason !== episode?.reason) {
        if (now === undefined) app.log.info({ reason: episode?.reason }, 'no longer shedding load')
        else app.log.warn({ reason: now.reason, ...now.measured }, `shedding load: ${now.reason} is past its limit`)
      }
      episode = now
      // Short of memory, what only reads goes on.
      if (now === undefined || (now.reason !== 'event_loop_delay' && request.method === 'GET')) return done()
      shedCount.inc({ reason: now.reason })
      done(now.reason === 'event_loop_delay'
        ? serviceUnavailable('The service is overloaded; try again shortly.', RETRY_AFTER_SECONDS)
        : serviceUnavailable('The service is short of memory; try again later.', RETRY_AFTER_SECONDS))
    }]
  }
  app.decorate('shedding', (route) => route.sheddable ? shed : undefined)
}

export default fp(loadSheddingPlugin, { name: 'load-shedding', dependencies: ['metrics'] })
