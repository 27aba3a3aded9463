import type { FastifyBaseLogger } from 'fastify'
import { channels as CHANNELS } from '../../generated/routes.js'
import type { TraceContext } from '../observability/trace-context.js'
import type { MemorySandbox, SandboxWatcher } from '../store/memory/sandboxes.js'
import type { SandboxReceiver } from '../store/sandboxes.js'
import type { Store } from '../store/store.js'
import { subscriberName } from './subscriptions.js'
import { type DeliveryMetrics, type DeliverySettings, POLL_INTERVAL_MS, SubscriberWorker } from './worker.js'

// A sandbox's outbox has this one subscriber while it has a receiver.
const RECEIVER = 'sandbox-receiver'
// What the sandboxes' deliveries are counted as in the metrics: one series for them all, however many come and go.
const METRICS_NAME = 'sandboxes'

/**
 * Delivers each sandbox's events to the receiver its test named, signed, retried and dead-lettered as the service's
 * webhooks are (with the sandbox's bounds), from the store of the sandbox as it is now: a reset's store takes over,
 * and a deleted sandbox's deliveries end with their attempts.
 */
export class SandboxReceivers implements SandboxWatcher {
  readonly #workers = new Map<string, SubscriberWorker>()
  // The connections of ended deliveries, closing: the app's close waits for them.
  readonly #closing = new Set<Promise<void>>()
  // Stores whose recorded events wake their sandbox's worker: one listener a store, however often its receiver changes.
  readonly #listened = new WeakSet<Store>()
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

  receiverSet (sandbox: MemorySandbox, receiver: SandboxReceiver): void {
    const { store, id } = sandbox
    this.receiverEnded(sandbox)
    const log = this.#log.child({ sandboxId: id, receiver: subscriberName(receiver.url) })
    const subscription = { id: RECEIVER, url: receiver.url, secret: receiver.secret, channels: CHANNELS }
    const worker = new SubscriberWorker(subscription, store.outbox, this.#settings, log, this.#metrics, this.#tracing, METRICS_NAME)
    this.#workers.set(id, worker)
    void store.outbox.subscribe(RECEIVER, CHANNELS)
    if (!this.#listened.has(store)) {
      this.#listened.add(store)
      store.outbox.onRecorded(() => { setImmediate(() => { void this.#workers.get(id)?.take() }) })
    }
  }

  receiverEnded ({ id, store }: MemorySandbox): void {
    const worker = this.#workers.get(id)
    if (worker === undefined) return
    this.#workers.delete(id)
    worker.stopped = true
    const closed: Promise<void> = worker.close(true).finally(() => { this.#closing.delete(closed) })
    this.#closing.add(closed)
    store.outbox.unsubscribe(RECEIVER)
  }

  /**
   * Resolves once the deliveries ended so far have closed their connections: called when every sandbox is deleted,
   * since a sandbox's events live only as long as the process.
   */
  async close (): Promise<void> {
    clearInterval(this.#poll)
    await Promise.all(this.#closing)
  }
}
