import type { FastifyBaseLogger } from 'fastify'
import type { Delivery, Outbox } from '../store/store.js'
import type { TraceContext } from '../observability/trace-context.js'
import { type AttemptOutcome, WebhookSender } from './sender.js'
import { subscriberName, type Subscription } from './subscriptions.js'
import type { CounterMetric, HistogramMetric, Metrics } from '../observability/metrics.js'
import { DEAD_LETTER_BYTES, DEAD_LETTERS } from '../domain/bounds.js'

// Attempts in progress per subscriber at most, and connections in its pool.
const CONCURRENT_PER_SUBSCRIBER = 32
// Each retry's wait is its configured delay, 10 % more or less at random, so that retries spread out.
const JITTER = 0.1
// From a receiver on the same host to WEBHOOK_TIMEOUT_MS's default (5 s) and past it.
const ATTEMPT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
/**
 * How often each subscriber's due deliveries are looked for while nothing wakes it sooner (an event this process
 * records, an attempt that ends): how soon retries, and another instance's events, are picked up.
 */
export const POLL_INTERVAL_MS = 250

interface Counts {
  delivered: number
  retried: number
  deadLettered: number
}

type Outcome = 'delivered' | 'retried' | 'dead_lettered' | 'dropped'

/** The deliveries' metrics, labelled by subscriber (`subscriberName`: no query shown), never anything a caller sends. */
/** How deliveries are attempted (WEBHOOK_* in the configuration). */
export interface DeliverySettings {
  /** How long a delivery attempt may wait to connect, for the response's headers, or during a pause in its body. */
  readonly timeoutMs: number
  /** The wait before each retry; a delivery is given up after one attempt more than there are delays. */
  readonly retryDelaysMs: readonly number[]
  /** How long a delivery taken by one instance may stay unsettled before another takes it over. */
  readonly reclaimAfterMs: number
}

export interface DeliveryMetrics {
  readonly outcomes: CounterMetric<'subscriber' | 'outcome'>
  readonly duration: HistogramMetric<'subscriber'>
  readonly deadLettersPushedOut: CounterMetric<'subscriber'>
}

// One set a registry: the service's subscribers and the sandboxes' receivers count in the same metrics.
const metricsOf = new WeakMap<Metrics, DeliveryMetrics>()

/** The deliveries' metrics in `metrics`, made on the first call. */
export function deliveryMetrics (metrics: Metrics): DeliveryMetrics {
  const made = metricsOf.get(metrics) ?? {
    outcomes: metrics.counter({
      name: 'items_service_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome: delivered, retried, dead_lettered (the last attempt failed), dropped (the subscriber had as many pending as the outbox keeps).',
      labelNames: ['subscriber', 'outcome'],
    }),
    duration: metrics.histogram({
      name: 'items_service_webhook_delivery_duration_seconds',
      help: 'Time of one delivery attempt, from sending to the receiver\'s status or the attempt\'s failure.',
      labelNames: ['subscriber'],
      buckets: ATTEMPT_BUCKETS
    }),
    deadLettersPushedOut: metrics.counter({
      name: 'items_service_webhook_dead_letters_pushed_out_total',
      help: `Dead letters dropped, the oldest first, to keep each subscriber's at ${DEAD_LETTERS} and ${DEAD_LETTER_BYTES} bytes of events.`,
      labelNames: ['subscriber'],
    })
  }
  metricsOf.set(metrics, made)
  return made
}

const jittered = (delayMs: number): number => Math.round(delayMs * (1 + JITTER * (2 * Math.random() - 1)))

/** Takes one subscriber's due deliveries from the outbox and attempts them, at most CONCURRENT_PER_SUBSCRIBER at once. */
export class SubscriberWorker {
  readonly counts: Counts = { delivered: 0, retried: 0, deadLettered: 0 }
  readonly subscription: Subscription
  readonly log: FastifyBaseLogger
  readonly #outbox: Outbox
  readonly #sender: WebhookSender
  readonly #config: DeliverySettings
  readonly #attempts = new Set<Promise<void>>()
  // Places for attempts that takes under way may fill (several can be, while the store answers).
  #reserved = 0
  #storeFailing = false
  stopped = false

  readonly #metrics: DeliveryMetrics
  readonly #tracing: TraceContext
  readonly #name: string
  readonly #now: () => number

  /**
   * `as.name`: the subscriber's in logs and metrics (`subscriberName` of its URL unless given); `as.now`: the clock
   * its deliveries fall due by and its retries are scheduled on (a sandbox's own; the service's unless given).
   */
  constructor (subscription: Subscription, outbox: Outbox, config: DeliverySettings, log: FastifyBaseLogger, metrics: DeliveryMetrics, tracing: TraceContext,
    as: { name?: string, now?: () => number } = {}) {
    this.subscription = subscription
    this.#outbox = outbox
    this.#sender = new WebhookSender(subscription, { timeoutMs: config.timeoutMs, connections: CONCURRENT_PER_SUBSCRIBER })
    this.#config = config
    this.#name = as.name ?? subscriberName(subscription.url)
    this.#now = as.now ?? Date.now
    this.log = log.child({ subscriber: this.#name })
    this.#metrics = metrics
    this.#tracing = tracing
  }

  /** The subscriber's name in logs and metrics. */
  get name (): string {
    return this.#name
  }

  /**
   * Takes what is due now, as many as there are free places. A full batch leaves no place free; each attempt that
   * ends takes again, so a backlog is worked through without waiting for the next poll.
   */
  async take (): Promise<void> {
    const free = CONCURRENT_PER_SUBSCRIBER - this.#attempts.size - this.#reserved
    if (free <= 0 || this.stopped) return
    this.#reserved += free
    try {
      const { deliveries, dropped } = await this.#outbox.take(this.subscription.id, this.#now(), free, this.#config.reclaimAfterMs)
      this.#storeRecovered()
      if (dropped > 0) {
        this.counts.deadLettered += dropped
        this.#count('dropped', dropped)
        this.log.error({ dropped, ...this.counts }, 'webhook deliveries dropped: the subscriber has as many pending as the outbox keeps')
      }
      // Each in the trace of the request that caused its event: the attempt's span (and so its traceparent header),
      // its store commands and the lines logged about it join that trace.
      for (const delivery of deliveries) this.#track(this.#tracing.within(delivery.event.traceparent, async () => { await this.#attempt(delivery) }))
    } catch (err) {
      if (!this.#storeFailing) this.log.warn({ err }, 'cannot take webhook deliveries from the store; trying again')
      this.#storeFailing = true
    } finally {
      this.#reserved -= free
    }
  }

  async pending (): Promise<number> {
    return await this.#outbox.pending(this.subscription.id)
  }

  /** Deliveries not yet ended, the ones in progress included. */
  async unfinished (): Promise<number> {
    return this.#attempts.size + await this.pending()
  }

  /** Resolves when the attempts in progress have ended. */
  async settled (): Promise<void> {
    await Promise.all(this.#attempts)
  }

  /** Closes the subscriber's connections, once their attempts have ended, or at once when `abort` is set. */
  async close (abort: boolean): Promise<void> {
    await this.#sender.close(abort)
  }

  #storeRecovered (): void {
    if (!this.#storeFailing) return
    this.#storeFailing = false
    this.log.info('webhook deliveries are taken from the store again')
  }

  #track (attempt: Promise<void>): void {
    this.#attempts.add(attempt)
    void attempt.finally(() => {
      this.#attempts.delete(attempt)
      void this.take()
    })
  }

  #count (outcome: Outcome, count = 1): void {
    this.#metrics.outcomes.inc({ subscriber: this.#name, outcome }, count)
  }

  async #attempt (delivery: Delivery): Promise<void> {
    const started = performance.now()
    const outcome = await this.#sender.send(delivery.event)
    this.#metrics.duration.observe({ subscriber: this.#name }, (performance.now() - started) / 1000)
    const retryDelay = this.#config.retryDelaysMs[delivery.attempt - 1]
    try {
      if (outcome.delivered) {
        await this.#outbox.settle(this.subscription.id, delivery)
        this.counts.delivered += 1
        this.#count('delivered')
        this.#logAttempt('info', delivery, outcome, 'webhook delivered')
      } else if (retryDelay === undefined) {
        const pushedOut = await this.#outbox.deadLetter(this.subscription.id, delivery, outcome.reason, this.#now())
        this.counts.deadLettered += 1
        this.#count('dead_lettered')
        this.#metrics.deadLettersPushedOut.inc({ subscriber: this.#name }, pushedOut)
        this.#logAttempt('error', delivery, outcome, 'webhook dead-lettered: its last attempt failed; kept for redelivery (GET /webhooks/dead-letters on OPS_PORT)')
      } else {
        const retryAt = this.#now() + jittered(retryDelay)
        await this.#outbox.settle(this.subscription.id, delivery, retryAt)
        this.counts.retried += 1
        this.#count('retried')
        this.#logAttempt('warn', delivery, outcome, `webhook attempt failed; retrying at ${new Date(retryAt).toISOString()}`)
      }
    } catch (err) {
      // The lease ends, and the delivery is taken again: at least once, never lost.
      this.log.warn({ err, eventId: delivery.event.id }, 'cannot record a webhook attempt in the store; the delivery will be taken again')
    }
  }

  #logAttempt (level: 'info' | 'warn' | 'error', delivery: Delivery, outcome: AttemptOutcome, message: string): void {
    const result = outcome.delivered ? { status: outcome.status } : { reason: outcome.reason }
    this.log[level]({ eventId: delivery.event.id, channel: delivery.event.channel, attempt: delivery.attempt, ...result, ...this.counts }, message)
  }
}
