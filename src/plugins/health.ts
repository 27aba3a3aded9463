import fastifyUnderPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    lifecycle: { draining: boolean }
  }
}

interface HealthPluginOptions {
  /** Shed requests with 503 while the event loop lags by more than this many milliseconds; 0 never sheds. */
  maxEventLoopDelayMs: number
}

/** Readiness turns false once shutdown begins; under overload every request is shed with a 503. */
async function healthPlugin (app: FastifyInstance, options: HealthPluginOptions): Promise<void> {
  app.decorate('lifecycle', { draining: false })
  // server.close() only ends the keep-alive connections idle at that moment; those of in-flight requests
  // would linger until their keep-alive timeout, so keep ending them as they become idle while draining.
  let reaper: NodeJS.Timeout | undefined
  app.addHook('preClose', async () => {
    app.lifecycle.draining = true
    reaper = setInterval(() => { app.server.closeIdleConnections() }, 50).unref()
  })
  app.addHook('onClose', async () => { clearInterval(reaper) })
  if (options.maxEventLoopDelayMs > 0) {
    await app.register(fastifyUnderPressure, { maxEventLoopDelay: options.maxEventLoopDelayMs, retryAfter: 5 })
  }
}

export default fp(healthPlugin, { name: 'health' })
