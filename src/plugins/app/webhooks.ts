import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { WebhooksConfig } from '../../config/config.js'
import type { SubscriberWorker } from '../../webhooks/worker.js'

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
  // Loaded only when there is a subscriber: the HTTP client and the signer are a good part of a start's imports.
  const { deliveryMetrics, POLL_INTERVAL_MS, SubscriberWorker } = await import('../../webhooks/worker.js')
  const { outbox } = app.store
  const metrics = deliveryMetrics(app.metrics)
  const workers = subscriptions.map((subscription) => new SubscriberWorker(subscription, outbox, options.config, app.log, metrics, app.tracing))
  // A gauge per subscriber read from the store at each scrape; one the store cannot tell now keeps its last figure.
  const storeGauge = (name: string, help: string, read: (worker: SubscriberWorker) => Promise<number>): void => {
    app.metrics.gauge({
      name,
      help,
      labelNames: ['subscriber'],
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
