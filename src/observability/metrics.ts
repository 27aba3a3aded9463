import type { Counter, CounterConfiguration, Gauge, GaugeConfiguration, Histogram, HistogramConfiguration } from 'prom-client'

/** A metric's configuration as prom-client takes it, less the registries: a Metrics puts it in its own. */
type Unregistered<Configuration> = Omit<Configuration, 'registers'>

export type CounterMetric<Label extends string = never> = Pick<Counter<Label>, 'inc' | 'labels'>
export type GaugeMetric<Label extends string = never> = Pick<Gauge<Label>, 'set'>
export type HistogramMetric<Label extends string = never> = Pick<Histogram<Label>, 'observe'>

/** One series of the request histogram: one route and status. */
export interface DurationSeries {
  observe: (seconds: number) => void
}

/** What the request histogram's series are labelled by. */
export type RequestLabels = Record<'method' | 'route' | 'operation' | 'status_code', string>

/**
 * What the service counts with, each plugin its own metrics. While the operations API exposes them (OPS_PORT),
 * prom-client's, in the registry it reads (src/observability/prometheus.ts); otherwise `UNREAD_METRICS`, which keep
 * nothing, and prom-client is never loaded (it is a good part of a start's imports).
 */
export interface Metrics {
  counter: <Label extends string = never>(configuration: Unregistered<CounterConfiguration<Label>>) => CounterMetric<Label>
  gauge: <Label extends string = never>(configuration: Unregistered<GaugeConfiguration<Label>>) => GaugeMetric<Label>
  histogram: <Label extends string = never>(configuration: Unregistered<HistogramConfiguration<Label>>) => HistogramMetric<Label>
  /** A new series of the request histogram (src/pipeline/request-metrics.ts makes one per route and status). */
  requestDurations: (labels: RequestLabels) => DurationSeries
  /** Every metric in Prometheus's text format, and its media type. */
  exposition: () => Promise<{ readonly contentType: string, readonly text: string }>
}

const ignored = (): void => {}
const UNREAD_COUNTER = { inc: ignored, labels: () => ({ inc: ignored }) }
const UNREAD_SERIES = { set: ignored, observe: ignored }

/** The metrics nobody reads: each keeps nothing, and a gauge's collect never runs. */
export const UNREAD_METRICS: Metrics = {
  counter: () => UNREAD_COUNTER,
  gauge: () => UNREAD_SERIES,
  histogram: () => UNREAD_SERIES,
  requestDurations: () => UNREAD_SERIES,
  exposition: async () => ({ contentType: 'text/plain; version=0.0.4; charset=utf-8', text: '' })
}
