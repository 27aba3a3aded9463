import type { IncomingMessage } from 'node:http'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { JOURNAL_WAITS, JOURNAL_WAITS_PER_SANDBOX, journalRecord } from '../../domain/journal.js'
import { KeyedWaits } from '../../runtime/keyed-waits.js'
import type { SandboxBounds, Sandboxes, SandboxStoreOptions } from '../../store/sandboxes.js'
import type { DeliverySettings } from '../../webhooks/worker.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The sandboxes (SANDBOXES=on); null when they are off. */
    sandboxes: Sandboxes | null
    /** The waits on the sandboxes' journals, by sandbox id (ended as the app closes); null when sandboxes are off. */
    journalWaits: KeyedWaits | null
  }
}

// `/sandboxes/{sandboxId}` and what follows it, the path the sandbox serves; the id a UUID in either case.
const SANDBOX_PATH = /^\/sandboxes\/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?=[/?]|$)/i

/**
 * How the server routes a request to a sandbox: as the path after the sandbox's base (Fastify's `rewriteUrl`),
 * noting which sandbox it names (in lower case) until the request's first hook, which finds the sandbox or answers
 * 404 as for a route that does not exist.
 */
export class SandboxRouting {
  readonly #routed = new WeakMap<IncomingMessage, string>()

  readonly rewriteUrl = (request: IncomingMessage): string => {
    // A server's request always has one.
    const url = request.url!
    if (!url.startsWith('/sandboxes/')) return url
    const match = SANDBOX_PATH.exec(url)
    if (match === null) return url
    this.#routed.set(request, match[1]!.toLowerCase())
    const rest = url.slice(match[0].length)
    return rest.startsWith('/') ? rest : `/${rest}`
  }

  /** The id of the sandbox `rewriteUrl` routed the request into, if any. */
  routedInto (request: IncomingMessage): string | undefined {
    return this.#routed.get(request)
  }
}

interface SandboxesPluginOptions {
  /** The routing the server was made with; null when sandboxes are off. */
  routing: SandboxRouting | null
  /** SANDBOX_LIMIT, SANDBOX_IDLE_SECONDS, SANDBOX_ACCOUNTS, and each account's quota (ACCOUNT_QUOTA_KIB). */
  bounds: SandboxBounds | undefined
  /** What each sandbox's store is made with: as the service's own. */
  store: SandboxStoreOptions
  /** How a sandbox's events are delivered to its receiver: as the service's webhooks (WEBHOOK_*). */
  deliveries: DeliverySettings
}

// Idle sandboxes are looked for this many times in their idle lifetime: one is deleted within a tenth of it past it.
const IDLE_CHECKS_PER_LIFETIME = 10

/**
 * Serves a request routed into a sandbox from the sandbox's store (`request.scopedStore`), before any step of its
 * route runs, and deletes the sandboxes that idle past their lifetime. The sandboxes are kept where the service's
 * store can keep them (on Redis, under key prefixes of their own, for every instance), or else in this process, each
 * a memory store of its own; on either, their events are delivered to the receiver each test named.
 */
async function sandboxesPlugin (app: FastifyInstance, { routing, bounds, store, deliveries }: SandboxesPluginOptions): Promise<void> {
  if (routing === null || bounds === undefined) {
    app.decorate('sandboxes', null)
    app.decorate('journalWaits', null)
    return
  }
  // Loaded only when sandboxes are on, as the webhooks plugin loads the deliveries only for a subscriber.
  const [{ MemorySandboxes }, { SandboxReceivers }, { deliveryMetrics }] = await Promise.all([
    import('../../store/memory/sandboxes.js'), import('../../webhooks/sandbox-receivers.js'), import('../../webhooks/worker.js')
  ])
  const receivers = new SandboxReceivers(deliveries, app.log, deliveryMetrics(app.metrics), app.tracing)
  const sandboxes = app.store.sandboxes?.(bounds, store, receivers) ?? new MemorySandboxes(bounds, store, receivers)
  app.decorate('sandboxes', sandboxes)
  const journalWaits = new KeyedWaits(JOURNAL_WAITS_PER_SANDBOX, JOURNAL_WAITS)
  sandboxes.onJournal((id) => { journalWaits.changed(id) })
  app.decorate('journalWaits', journalWaits)
  app.metrics.gauge<'state'>({
    name: 'items_service_sandbox_journal_waits',
    help: 'Waits on sandboxes\' journals this instance holds (held), and the most it holds in all (limit: one more is refused with 429).',
    labelNames: ['state'],
    collect () {
      this.set({ state: 'held' }, journalWaits.held)
      this.set({ state: 'limit' }, journalWaits.inAll)
    }
  })
  app.metrics.gauge<'state'>({
    name: 'items_service_sandboxes',
    help: 'Sandboxes, by state: live (that exist; on Redis, every instance\'s) and limit (SANDBOX_LIMIT: one more is refused with 507).',
    labelNames: ['state'],
    async collect () {
      this.set({ state: 'limit' }, bounds.limit)
      // While the store is unreachable, the last figure stays.
      const live = await sandboxes.count().catch(() => undefined)
      if (live !== undefined) this.set({ state: 'live' }, live)
    }
  })
  app.addHook('onRequest', (request, reply, done) => {
    const id = routing.routedInto(request.raw)
    if (id === undefined) {
      done()
      return
    }
    sandboxes.use(id).then((sandbox) => {
      if (sandbox === undefined) {
        reply.callNotFound()
        return
      }
      request.scopedStore = sandbox.store
      done()
    }, done)
  })
  // Noted before the answer leaves, so that a test reads its own request's entry as soon as it has the answer. A
  // journal that cannot note it (the store out of reach) does not hold the answer back: it is logged.
  app.addHook('onSend', async (request, reply, payload) => {
    const id = routing.routedInto(request.raw)
    const store = request.scopedStore
    if (id === undefined || store === null) return payload
    const record = journalRecord({
      requestId: request.id,
      operationId: request.routeOptions.config.operationId,
      status: reply.statusCode,
      idempotencyKey: request.headers['idempotency-key'],
      accountId: request.user?.id,
      now: store.now(),
      caused: request.causedEvents
    })
    await sandboxes.note(id, record).catch((err: unknown) => { request.log.warn({ err, sandboxId: id }, 'the sandbox\'s journal could not note the request') })
    return payload
  })
  const sweeper = setInterval(() => {
    sandboxes.deleteIdle().then(async (deleted) => {
      if (deleted.length === 0) return
      const left = await sandboxes.count()
      for (const sandboxId of deleted) app.log.info({ sandboxId, left }, 'idle sandbox deleted')
    }).catch((err: unknown) => { app.log.warn({ err }, 'the sweep of idle sandboxes failed') })
  }, Math.max(1000, Math.ceil(bounds.idleMs / IDLE_CHECKS_PER_LIFETIME))).unref()
  // A wait would hold the close for its time: each is answered at once instead.
  app.addHook('preClose', async () => { journalWaits.end() })
  app.addHook('onClose', async () => {
    clearInterval(sweeper)
    await sandboxes.close()
  })
}

export default fp(sandboxesPlugin, { name: 'sandboxes', dependencies: ['store', 'metrics', 'tracing'] })
