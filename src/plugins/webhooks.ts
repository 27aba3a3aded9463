import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { Counter, Gauge, Histogram } from 'prom-client'
import type { WebhooksConfig } from '../config.js'
import { DEAD_LETTER_BYTES, DEAD_LETTERS } from '../store/rules.js'
import type { Delivery, Outbox } from '../store/store.js'
import { type AttemptOutcome, WebhookSender } from '../webhooks/sender.js'
import { subscriberName, type Subscription } from '../webhooks/subscriptions.js'
import type { TraceContext } from './tracing.js'

// How often each subscriber's due deliveries are looked for while nothing wakes it sooner (an event this process
// records, an attempt that ends): how soon another instance's events and retries are picked up.
const POLL_INTERVAL_MS = 250
// Attempts in progress per subscriber at most, and connections in its pool.
const CONCURRENT_PER_SUBSCRIBER = 32
// Each retry's wait is its configured delay, 10 % more or less at random, so that retries spread out.
const JITTER = 0.1

interface Counts {
  delivered: number
  retried: number
  deadLettered: number
}

type Outcome = 'delivered' | 'retried' | 'dead_lettered' | 'dropped'

/** The deliveries' metrics, labelled by subscriber (`subscriberName`: no query shown), never anything a caller sends. */
interface DeliveryMetrics {
  readonly outcomes: Counter<'subscriber' | 'outcome'>
  readonly duration: Histogram<'subscriber'>
  readonly deadLettersPushedOut: Counter<'subscriber'>
}

// From a receiver on the same host to WEBHOOK_TIMEOUT_MS's default (5 s) and past it.
const ATTEMPT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

const jittered = (delayMs: number): number => Math.round(delayMs * (1 + JITTER * (2 * Math.random() - 1)))

/** Takes one subscriber's due deliveries from the outbox and attempts them, at most CONCURRENT_PER_SUBSCRIBER at once. */
class SubscriberWorker {
  readonly counts: Counts = { delivered: 0, retried: 0, deadLettered: 0 }
  readonly subscription: Subscription
  readonly log: FastifyBaseLogger
  readonly #outbox: Outbox
  readonly #sender: WebhookSender
  readonly #config: WebhooksConfig
  readonly #attempts = new Set<Promise<void>>()
  // Places for attempts that takes under way may fill (several can be, while the store answers).
  #reserved = 0
  #storeFailing = false
  stopped = false

  readonly #metrics: DeliveryMetrics
  readonly #tracing: TraceContext
  readonly #name: string

  constructor (subscription: Subscription, outbox: Outbox, config: WebhooksConfig, log: FastifyBaseLogger, metrics: DeliveryMetrics, tracing: TraceContext) {
    this.subscription = subscription
    this.#outbox = outbox
    this.#sender = new WebhookSender(subscription, { timeoutMs: config.timeoutMs, connections: CONCURRENT_PER_SUBSCRIBER })
    this.#config = config
    this.#name = subscriberName(subscription.url)
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
      const { deliveries, dropped } = await this.#outbox.take(this.subscription.id, Date.now(), free, this.#config.reclaimAfterMs)
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
        const pushedOut = await this.#outbox.deadLetter(this.subscription.id, delivery, outcome.reason, Date.now())
        this.counts.deadLettered += 1
        this.#count('dead_lettered')
        this.#metrics.deadLettersPushedOut.inc({ subscriber: this.#name }, pushedOut)
        this.#logAttempt('error', delivery, outcome, 'webhook dead-lettered: its last attempt failed; kept for redelivery (GET /webhooks/dead-letters on OPS_PORT)')
      } else {
        const retryAt = Date.now() + jittered(retryDelay)
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

interface WebhooksPluginOptions {
  config: WebhooksConfig
}

/**
 * Delivers the events of the store's outbox to the configured webhooks, at least once: a 2xx ends a delivery; any
 * other status, a timeout or a connection error is retried on WEBHOOK_RETRY_DELAYS_MS; after the last attempt the
 * delivery is dead-lettered: logged at error level and kept in the store, for the operations API to list and
 * deliver again. No HTTP response waits for a delivery.
 *
 * At shutdown, with the memory store, pending deliveries get until the shutdown plugin's deadline (80 % of
 * SHUTDOWN_TIMEOUT_MS), and those left are counted and logged as lost; with Redis, the attempts in progress end and the
 * rest stay for the other instances.
 */
async function webhooksPlugin (app: FastifyInstance, options: WebhooksPluginOptions): Promise<void> {
  const { subscriptions } = options.config
  if (subscriptions.length === 0) return
  const { outbox } = app.store
  const metrics: DeliveryMetrics = {
    outcomes: new Counter({
      name: 'items_service_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome: delivered, retried, dead_lettered (the last attempt failed), dropped (the subscriber had as many pending as the outbox keeps).',
      labelNames: ['subscriber', 'outcome'],
      registers: [app.metrics]
    }),
    duration: new Histogram({
      name: 'items_service_webhook_delivery_duration_seconds',
      help: 'Time of one delivery attempt, from sending to the receiver\'s status or the attempt\'s failure.',
      labelNames: ['subscriber'],
      buckets: ATTEMPT_BUCKETS,
      registers: [app.metrics]
    }),
    deadLettersPushedOut: new Counter({
      name: 'items_service_webhook_dead_letters_pushed_out_total',
      help: `Dead letters dropped, the oldest first, to keep each subscriber's at ${DEAD_LETTERS} and ${DEAD_LETTER_BYTES} bytes of events.`,
      labelNames: ['subscriber'],
      registers: [app.metrics]
    })
  }
  const workers = subscriptions.map((subscription) => new SubscriberWorker(subscription, outbox, options.config, app.log, metrics, app.tracing))
  // A gauge per subscriber read from the store at each scrape; one the store cannot tell now keeps its last figure.
  const storeGauge = (name: string, help: string, read: (worker: SubscriberWorker) => Promise<number>): void => {
    // eslint-disable-next-line no-new -- registered in the registry, which reads it
    new Gauge({
      name,
      help,
      labelNames: ['subscriber'],
      registers: [app.metrics],
      async collect () {
        await Promise.all(workers.map(async (worker) => {
          const figure = await read(worker).catch(() => undefined)
          if (figure !== undefined) this.set({ subscriber: worker.name }, figure)
        }))
      }
    })
  }
  storeGauge('items_service_webhook_backlog', 'Deliveries not yet ended per subscriber, read from the store (on Redis, every instance\'s).',
    async (worker) => await worker.pending())
  storeGauge('items_service_webhook_dead_letters',
    'Dead letters kept per subscriber, read from the store (on Redis, every instance\'s): deliver them again through the operations API.',
    async (worker) => (await outbox.deadLetters(worker.subscription.id, { after: 0, limit: 0 })).total)
  for (const subscription of subscriptions) await outbox.subscribe(subscription.id, subscription.channels)

  const takeAll = (): void => { for (const worker of workers) void worker.take() }
  // An event this process records is taken at once by the subscribers of its channel, not at their next poll.
  outbox.onRecorded(({ channel }) => {
    for (const worker of workers) {
      if (worker.subscription.channels.some((subscribed) => subscribed === channel)) setImmediate(() => { void worker.take() })
    }
  })
  const unfinishedAnywhere = async (): Promise<boolean> =>
    (await Promise.all(workers.map(async (worker) => await worker.unfinished()))).some((count) => count > 0)
  const poll = setInterval(takeAll, POLL_INTERVAL_MS)
  app.addHook('onReady', async () => { takeAll() })

  app.addHook('onClose', async () => {
    clearInterval(poll)
    // Set by the shutdown plugin's preClose hook, which every close runs first.
    const deadline = app.lifecycle.shutdownDeadline
    if (!outbox.durable) {
      // What is in this process's memory is lost when it ends: deliver what is due while there is time.
      while (Date.now() < deadline && await unfinishedAnywhere()) {
        takeAll()
        await sleep(Math.min(POLL_INTERVAL_MS, deadline - Date.now()))
      }
    }
    for (const worker of workers) worker.stopped = true
    const allSettled = Promise.all(workers.map(async (worker) => { await worker.settled() }))
    // The deadline's timer is cancelled once the workers settle: left running, it would keep the process alive
    // until the deadline after the app has closed.
    const cancelDeadline = new AbortController()
    const timedOut = await Promise.race([
      allSettled.then(() => false),
      sleep(Math.max(0, deadline - Date.now()), true, { signal: cancelDeadline.signal }).catch(() => false)
    ])
    cancelDeadline.abort()
    await Promise.all(workers.map(async (worker) => { await worker.close(timedOut) }))
    await allSettled
    for (const worker of workers) {
      const lost = outbox.durable ? 0 : await worker.pending()
      if (lost > 0) worker.log.error({ lost, ...worker.counts }, 'webhook deliveries lost at shutdown: the memory store keeps them only while the process runs')
      else worker.log.info(worker.counts, 'webhook deliveries at shutdown')
    }
  })
}

// Encapsulated (its hooks serve no one else), with the plugins whose state it reads declared.
export default fp(webhooksPlugin, { name: 'webhooks', dependencies: ['store', 'shutdown', 'metrics', 'tracing'], encapsulate: true })
