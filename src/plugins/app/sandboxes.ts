import type { IncomingMessage } from 'node:http'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Sandbox, Sandboxes } from '../../store/sandboxes.js'
import type { DeliverySettings } from '../../webhooks/worker.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The sandboxes (SANDBOXES=on); null when they are off. */
    sandboxes: Sandboxes | null
  }
}

// `/sandboxes/{sandboxId}` and what follows it, the path the sandbox serves; the id a UUID in either case.
const SANDBOX_PATH = /^\/sandboxes\/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?=[/?]|$)/i

/**
 * How the server routes a request to a sandbox: as the path after the sandbox's base (Fastify's `rewriteUrl`),
 * noting which sandbox it is for until the request's first hook. A request under an id no sandbox has is routed as
 * it is, to the 404 of a route that does not exist.
 */
export class SandboxRouting {
  readonly sandboxes: Sandboxes
  readonly #routed = new WeakMap<IncomingMessage, Sandbox>()

  constructor (sandboxes: Sandboxes) {
    this.sandboxes = sandboxes
  }

  readonly rewriteUrl = (request: IncomingMessage): string => {
    // A server's request always has one.
    const url = request.url!
    if (!url.startsWith('/sandboxes/')) return url
    const match = SANDBOX_PATH.exec(url)
    if (match === null) return url
    const sandbox = this.sandboxes.get(match[1]!)
    if (sandbox === undefined) return url
    this.#routed.set(request, sandbox)
    const rest = url.slice(match[0].length)
    return rest.startsWith('/') ? rest : `/${rest}`
  }

  /** The sandbox `rewriteUrl` routed the request into, if any. */
  routedInto (request: IncomingMessage): Sandbox | undefined {
    return this.#routed.get(request)
  }
}

interface SandboxesPluginOptions {
  /** The routing the server was made with; null when sandboxes are off. */
  routing: SandboxRouting | null
  /** How a sandbox's events are delivered to its receiver: as the service's webhooks (WEBHOOK_*). */
  deliveries: DeliverySettings
}

// Idle sandboxes are looked for this many times in their idle lifetime: one is deleted within a tenth of it past it.
const IDLE_CHECKS_PER_LIFETIME = 10

/**
 * Serves a request routed into a sandbox from the sandbox's store (`request.scopedStore`), before any step of its
 * route runs, delivers each sandbox's events to the receiver its test named, and deletes the sandboxes that idle
 * past their lifetime; all of them when the app closes.
 */
async function sandboxesPlugin (app: FastifyInstance, { routing, deliveries }: SandboxesPluginOptions): Promise<void> {
  app.decorate('sandboxes', routing?.sandboxes ?? null)
  if (routing === null) return
  const { sandboxes } = routing
  // Loaded only when sandboxes are on, as the webhooks plugin loads it only for a subscriber.
  const [{ SandboxReceivers }, { deliveryMetrics }] = await Promise.all([import('../../webhooks/sandbox-receivers.js'), import('../../webhooks/worker.js')])
  const receivers = new SandboxReceivers(deliveries, app.log, deliveryMetrics(app.metrics), app.tracing)
  sandboxes.watch(receivers)
  app.addHook('onRequest', (request, _reply, done) => {
    const sandbox = routing.routedInto(request.raw)
    if (sandbox !== undefined) {
      request.scopedStore = sandbox.store
      sandbox.usedAt = Date.now()
    }
    done()
  })
  const sweeper = setInterval(() => {
    for (const sandboxId of sandboxes.deleteIdle(Date.now())) app.log.info({ sandboxId, left: sandboxes.size }, 'idle sandbox deleted')
  }, Math.max(1000, Math.ceil(sandboxes.settings.idleMs / IDLE_CHECKS_PER_LIFETIME))).unref()
  app.addHook('onClose', async () => {
    clearInterval(sweeper)
    sandboxes.deleteAll()
    await receivers.close()
  })
}

export default fp(sandboxesPlugin, { name: 'sandboxes', dependencies: ['store', 'metrics', 'tracing'] })
