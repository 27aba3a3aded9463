import { performance } from 'node:perf_hooks'
import type { FastifyInstance, onResponseHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import { appendedHooks } from './route-hooks.js'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The instance's Prometheus metrics: each plugin registers its own in it. Read through the operations API
     * (OPS_PORT); counting what happens costs nothing noticeable when nobody reads it.
     */
    metrics: Registry
  }
}

interface MetricsPluginOptions {
  /** Whether anyone reads the metrics (OPS_PORT is set): only then are requests timed and the runtime sampled. */
  exposed: boolean
}

// OpenTelemetry's advice for HTTP server durations, in seconds.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]

type RequestLabel = 'method' | 'route' | 'operation' | 'status_code'

/**
 * Decorates the app with its metrics registry and, while the metrics are exposed, times every request of a
 * contract operation (labelled by the contract's path template and operationId, never by the raw URL, so the
 * labels are bounded) and samples the process and its event loop.
 */
async function metricsPlugin (app: FastifyInstance, options: MetricsPluginOptions): Promise<void> {
  const registry = new Registry()
  app.decorate('metrics', registry)
  if (!options.exposed) return

  collectDefaultMetrics({ register: registry })
  let utilization = performance.eventLoopUtilization()
  // eslint-disable-next-line no-new -- registered in the registry, which reads it
  new Gauge({
    name: 'nodejs_eventloop_utilization_ratio',
    help: 'Share of the time since the last scrape that the event loop was busy.',
    registers: [registry],
    collect () {
      const since = performance.eventLoopUtilization(utilization)
      utilization = performance.eventLoopUtilization()
      this.set(since.utilization)
    }
  })

  const duration = new Histogram<RequestLabel>({
    name: 'http_server_request_duration_seconds',
    help: 'Time from a request\'s arrival to its response\'s end, by contract operation and status.',
    labelNames: ['method', 'route', 'operation', 'status_code'],
    buckets: DURATION_BUCKETS,
    registers: [registry]
  })
  app.addHook('onRoute', (route) => {
    const operation = route.config?.operationId
    if (operation === undefined) return
    const method = String(route.method)
    const template = route.url.replace(/:(\w+)/g, '{$1}')
    // One labelled child per status the route answers, made on its first use, so a response looks none up.
    const byStatus = new Map<number, Histogram.Internal<RequestLabel>>()
    const observe: onResponseHookHandler = (_request, reply, done) => {
      let child = byStatus.get(reply.statusCode)
      if (child === undefined) {
        child = duration.labels({ method, route: template, operation, status_code: String(reply.statusCode) })
        byStatus.set(reply.statusCode, child)
      }
      child.observe(reply.elapsedTime / 1000)
      done()
    }
    route.onResponse = appendedHooks(route.onResponse, observe)
  })
}

export default fp(metricsPlugin, { name: 'metrics' })
