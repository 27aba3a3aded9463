import type { onResponseHookHandler } from 'fastify'
import type { DurationSeries, Metrics } from '../observability/metrics.js'
import { contractPath, type StepFor } from './step.js'

/**
 * The step of every operation while the metrics are exposed (OPS_PORT is set): times each request into the request
 * histogram, labelled by the contract's path template and operationId, never by the raw URL, so the labels are
 * bounded. Nothing runs while nobody reads the metrics.
 */
export function requestMetrics (metrics: Metrics, exposed: boolean): StepFor {
  if (!exposed) return () => undefined
  return (route) => {
    const { method, operationId: operation } = route
    const template = contractPath(route.url)
    // One series per status the route answers, made on its first use.
    const byStatus = new Map<number, DurationSeries>()
    const observe: onResponseHookHandler = (_request, reply, done) => {
      let series = byStatus.get(reply.statusCode)
      if (series === undefined) {
        series = metrics.requestDurations({ method, route: template, operation, status_code: String(reply.statusCode) })
        byStatus.set(reply.statusCode, series)
      }
      series.observe(reply.elapsedTime / 1000)
      done()
    }
    return { onResponse: [observe] }
  }
}
