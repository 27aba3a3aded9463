import type { onResponseHookHandler } from 'fastify'
import { Registry } from 'prom-client'
import { contractPath, type StepFor } from './step.js'

// OpenTelemetry's advice for HTTP server durations, in seconds.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
const DURATION = 'http_server_request_duration_seconds'

type RequestLabel = 'method' | 'route' | 'operation' | 'status_code'

/**
 * One series of the request histogram (one route and status). Hand-written: prom-client's observe validates and
 * hashes the labels on every call, which cost more than this budget allows per request (docs/performance.md).
 */
class DurationSeries {
  readonly #labels: string
  // Per bucket, not cumulative; the last is past the largest bound.
  readonly #counts = new Array<number>(DURATION_BUCKETS.length + 1).fill(0)
  #sum = 0
  #count = 0

  constructor (labels: Record<RequestLabel, string>) {
    this.#labels = Object.entries(labels).map(([name, value]) => `,${name}="${value.replace(/[\\"]/g, '\\$&').replace(/\n/g, '\\n')}"`).join('')
  }

  observe (seconds: number): void {
    let bucket = 0
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket += 1
    this.#counts[bucket]! += 1
    this.#sum += seconds
    this.#count += 1
  }

  /** The series' lines in Prometheus's text format. */
  exposition (): string {
    let cumulative = 0
    const labels = this.#labels.slice(1)
    const buckets = DURATION_BUCKETS.map((bound, bucket) => {
      cumulative += this.#counts[bucket]!
      return `${DURATION}_bucket{le="${bound}"${this.#labels}} ${cumulative}\n`
    })
    return `${buckets.join('')}${DURATION}_bucket{le="+Inf"${this.#labels}} ${this.#count}\n${DURATION}_sum{${labels}} ${this.#sum}\n${DURATION}_count{${labels}} ${this.#count}\n`
  }
}

/** The registry, with the request histogram's series after prom-client's own metrics. */
export class ServiceRegistry extends Registry {
  readonly #durations: DurationSeries[] = []

  series (labels: Record<RequestLabel, string>): DurationSeries {
    const series = new DurationSeries(labels)
    this.#durations.push(series)
    return series
  }

  override async metrics (): Promise<string> {
    const others = await super.metrics()
    if (this.#durations.length === 0) return others
    return `${others}# HELP ${DURATION} Time from a request's arrival to its response's end, by contract operation and status.\n# TYPE ${DURATION} histogram\n${this.#durations.map((series) => series.exposition()).join('')}`
  }
}

/**
 * The step of every operation while the metrics are exposed (OPS_PORT is set): times each request into the request
 * histogram, labelled by the contract's path template and operationId, never by the raw URL, so the labels are
 * bounded. Nothing runs while nobody reads the metrics.
 */
export function requestMetrics (registry: ServiceRegistry, exposed: boolean): StepFor {
  if (!exposed) return () => undefined
  return (route) => {
    const { method, operationId: operation } = route
    const template = contractPath(route.url)
    // One series per status the route answers, made on its first use.
    const byStatus = new Map<number, DurationSeries>()
    const observe: onResponseHookHandler = (_request, reply, done) => {
      let series = byStatus.get(reply.statusCode)
      if (series === undefined) {
        series = registry.series({ method, route: template, operation, status_code: String(reply.statusCode) })
        byStatus.set(reply.statusCode, series)
      }
      series.observe(reply.elapsedTime / 1000)
      done()
    }
    return { onResponse: [observe] }
  }
}
