import { performance } from 'node:perf_hooks'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { DurationSeries, Metrics, RequestLabels } from './metrics.js'

// OpenTelemetry's advice for HTTP server durations, in seconds.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
const DURATION = 'http_server_request_duration_seconds'

/**
 * One series of the request histogram (one route and status). Hand-written: prom-client's observe validates and
 * hashes the labels on every call, which cost more than this budget allows per request (docs/performance.md).
 */
class RequestDurationSeries implements DurationSeries {
  readonly #labels: string
  // Per bucket, not cumulative; the last is past the largest bound.
  readonly #counts = new Array<number>(DURATION_BUCKETS.length + 1).fill(0)
  #sum = 0
  #count = 0

  constructor (labels: RequestLabels) {
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
class ServiceRegistry extends Registry {
  readonly #durations: RequestDurationSeries[] = []

  series (labels: RequestLabels): RequestDurationSeries {
    const series = new RequestDurationSeries(labels)
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
 * The metrics the operations API reads: prom-client's, in one registry, with the process's and its event loop's
 * (sampled only here, where someone reads them).
 */
export function prometheusMetrics (): Metrics {
  const registry = new ServiceRegistry()
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
  return {
    counter: (configuration) => new Counter({ ...configuration, registers: [registry] }),
    gauge: (configuration) => new Gauge({ ...configuration, registers: [registry] }),
    histogram: (configuration) => new Histogram({ ...configuration, registers: [registry] }),
    requestDurations: (labels) => registry.series(labels),
    exposition: async () => ({ contentType: registry.contentType, text: await registry.metrics() })
  }
}
