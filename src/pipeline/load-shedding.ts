import { getHeapStatistics } from 'node:v8'
import type { FastifyBaseLogger } from 'fastify'
import type { AppConfig } from '../config/config.js'
import { serviceUnavailable } from '../errors.js'
import { heapUsedLimit } from '../runtime/heap.js'
import type { RouteStep, StepFor } from './step.js'
import type { Metrics } from '../observability/metrics.js'

/** What the step reads of the process's load, sampled elsewhere (src/plugins/external/under-pressure.ts). */
export interface LoadReadings {
  readonly eventLoopDelayMs: () => number
  readonly memoryUsage: () => { readonly heapUsed: number, readonly rssBytes: number }
}

interface LoadSheddingOptions {
  readonly readings: LoadReadings
  readonly limits: Pick<AppConfig, 'maxEventLoopDelayMs' | 'maxHeapUsedBytes'>
  readonly metrics: Metrics
  readonly log: FastifyBaseLogger
}

interface Overload {
  readonly reason: 'event_loop_delay' | 'heap_used' | 'rss'
  /** The figures that passed the limit, for the log line. */
  readonly measured: Record<string, number>
}

// Response buffers and sockets live outside the heap, and code and the runtime take a fixed share: the resident
// size may reach twice the heap limit and this much more.
const RSS_ALLOWANCE_BYTES = 256 * 1024 * 1024
const RETRY_AFTER_SECONDS = 5

/**
 * The step of every operation the contract does not exempt (`x-load-shedding: exempt`): under overload, its
 * requests are shed with a 503. The exempt ones are what frees memory or ends access, which shedding would keep
 * short of memory, or a stolen session open, for as long as the overload lasts. Every request is shed while the
 * event loop lags, only writes while memory is short (past limits derived from the heap V8 may grow to, well
 * before V8 gives up, while what only reads goes on).
 */
export function loadShedding ({ readings, limits, metrics, log }: LoadSheddingOptions): StepFor {
  const heapLimit = getHeapStatistics().heap_size_limit
  const maxHeapUsedBytes = heapUsedLimit(limits.maxHeapUsedBytes)
  const maxRssBytes = 2 * heapLimit + RSS_ALLOWANCE_BYTES
  const { maxEventLoopDelayMs } = limits
  const shedCount = metrics.counter<'reason'>({
    name: 'items_service_shed_total',
    help: 'Requests refused with 503 under overload, by the limit passed: event_loop_delay, heap_used or rss.',
    labelNames: ['reason']
  })
  const overload = (): Overload | undefined => {
    const { heapUsed, rssBytes } = readings.memoryUsage()
    const eventLoopDelayMs = readings.eventLoopDelayMs()
    if (maxEventLoopDelayMs > 0 && eventLoopDelayMs > maxEventLoopDelayMs) {
      return { reason: 'event_loop_delay', measured: { eventLoopDelayMs, maxEventLoopDelayMs } }
    }
    if (heapUsed > maxHeapUsedBytes) return { reason: 'heap_used', measured: { heapUsedBytes: heapUsed, maxHeapUsedBytes } }
    if (rssBytes > maxRssBytes) return { reason: 'rss', measured: { rssBytes, maxRssBytes } }
    return undefined
  }
  // What was past its limit at the last request; undefined while nothing is.
  let episode: Overload | undefined
  const shed: RouteStep = {
    onRequest: [(request, _reply, done) => {
      const now = overload()
      // One line when an overload begins, with the figure past its limit, and one when it ends, however many
      // requests it sheds in between.
      if (now?.reason !== episode?.reason) {
        if (now === undefined) log.info({ reason: episode?.reason }, 'no longer shedding load')
        else log.warn({ reason: now.reason, ...now.measured }, `shedding load: ${now.reason} is past its limit`)
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
  return (route) => route.sheddable ? shed : undefined
}
