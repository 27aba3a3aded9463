import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { collectDefaultMetrics, Gauge } from 'prom-client'
import { ServiceRegistry } from '../../pipeline/request-metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The instance's Prometheus metrics: each plugin registers its own in it. Read through the operations API
     * (OPS_PORT); counting what happens costs nothing noticeable when nobody reads it.
     */
    metrics: ServiceRegistry
  }
}

interface MetricsPluginOptions {
  /** Whether anyone reads the metrics (OPS_PORT is set): only then is the runtime sampled. */
  exposed: boolean
}

/**
 * Decorates the app with its metrics registry (the request histogram's series are the pipeline's, see
 * src/pipeline/request-metrics.ts) and, while the metrics are exposed, samples the process and its event loop.
 */
async function metricsPlugin (app: FastifyInstance, options: MetricsPluginOptions): Promise<void> {
  const registry = new ServiceRegistry()
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
}

export default fp(metricsPlugin, { name: 'metrics' })
