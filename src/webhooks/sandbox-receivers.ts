import type { FastifyBaseLogger } from 'fastify'
import { channels as CHANNELS } from '../../generated/routes.js'
import type { TraceContext } from '../observability/trace-context.js'
import type { ReceiverDeliveries, SandboxWatcher } from '../store/sandboxes.js'
import type { Outbox } from '../store/store.js'
import { subscriberName } from './subscriptions.js'
import { type DeliveryMetrics, type DeliverySettings, POLL_INTERVAL_MS, SubscriberWorker } from './worker.js'

// What the sandboxes' deliveries are counted as in the metrics: one series for them all, however many come and go.
const METRICS_NAME = 'sandboxes'

/**
 * Delivers each sandbox's events to the receiver its test named, signed, retried and dead-lettered as the service's
 * webhooks are (with the sandbox's bounds), from the outbox of the sandbox as it is now: a reset's takes over, and a
 * deleted sandbox's deliveries end with their attempts. Any number of instances may deliver one sandbox's (on Redis):
 * each delivery is leased to the one that takes it.
 */
export class SandboxReceivers implements SandboxWatcher {
  readonly #workers = new Map<string, SubscriberWorker>()
  // The connections of ended deliveries, closing: the app's close waits for them.
  readonly #closing = new Set<Promise<void>>()
  // Outboxes whose recorded events wake their sandbox's worker: one listener an outbox, however often its receiver changes.
  readonly #listened = new WeakSet<Outbox>()
  readonly #settings: DeliverySettings
  readonly #log: FastifyBaseLogger
  readonly #metrics: DeliveryMetrics
  readonly #tracing: TraceContext
  readonly #poll: NodeJS.Timeout

  constructor (settings: DeliverySettings, log: FastifyBaseLogger, metrics: DeliveryMetrics, tracing: TraceContext) {
    this.#settings = settings
    this.#log = log
    this.#metrics = metrics
    this.#tracing = tracing
    this.#poll = setInterval(() => { for (const worker of this.#workers.values()) void worker.take() }, POLL_INTERVAL_MS).unref()
  }

  receiverSet ({ sandboxId, subscriber, receiver, outbox, now }: ReceiverDeliveries): void {
    this.receiverEnded(sandboxId)
    const log = this.#log.child({ sandboxId, receiver: subscriberName(receiver.url) })
    const subscription = { id: subscriber, url: receiver.url, secret: receiver.secret, channels: CHANNELS }
    const worker = new SubscriberWorker(subscription, outbox, this.#settings, log, this.#metrics, this.#tracing, { name: METRICS_NAME, now })
    this.#workers.set(sandboxId, worker)
    void outbox.subscribe(subscriber, CHANNELS)
    if (!this.#listened.has(outbox)) {
      this.#listened.add(outbox)
      outbox.onRecorded(() => { setImmediate(() => { void this.#workers.get(sandboxId)?.take() }) })
    }
  }

  receiverEnded (sandboxId: string): void {
    const worker = this.#workers.get(sandboxId)
    if (worker === undefined) return
    this.#workers.delete(sandboxId)
    worker.stopped = true
    const closed: Promise<void> = worker.close(true).finally(() => { this.#closing.delete(closed) })
    this.#closing.add(closed)
  }

  /**
   * Resolves once the deliveries ended so far have closed their connections: called when the sandboxes are closed,
   * every delivery ended.
   */
  async close (): Promise<void> {
    clearInterval(this.#poll)
    await Promise.all(this.#closing)
  }
}
