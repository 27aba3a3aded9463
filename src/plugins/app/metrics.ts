import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { type Metrics, UNREAD_METRICS } from '../../observability/metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The instance's metrics: each plugin makes its own. Read through the operations API (OPS_PORT); counting what
     * happens costs nothing noticeable when nobody reads it, and nothing at all without OPS_PORT.
     */
    metrics: Metrics
  }
}

interface MetricsPluginOptions {
  /** Whether anyone reads the metrics (OPS_PORT is set): only then is prom-client loaded and the runtime sampled. */
  exposed: boolean
}

/** Decorates the app with its metrics: prom-client's while they are exposed, ones that keep nothing otherwise. */
async function metricsPlugin (app: FastifyInstance, options: MetricsPluginOptions): Promise<void> {
  app.decorate('metrics', options.exposed ? (await import('../../observability/prometheus.js')).prometheusMetrics() : UNREAD_METRICS)
}

export default fp(metricsPlugin, { name: 'metrics' })
