import fastifyCors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

interface CorsPluginOptions {
  /** The browser origins allowed to call the API (CORS_ORIGINS); none switches CORS off. */
  origins: readonly string[]
}

// How long a browser may reuse a preflight's answer.
const PREFLIGHT_MAX_AGE_SECONDS = 600

/**
 * Lets browser clients on the configured origins call the API: preflights answer 204, and the response headers a
 * client reads (the request id, Location, ETag, Retry-After) are exposed to its scripts.
 */
async function corsPlugin (app: FastifyInstance, options: CorsPluginOptions): Promise<void> {
  if (options.origins.length === 0) return
  await app.register(fastifyCors, {
    origin: [...options.origins],
    methods: ['GET', 'POST', 'PATCH', 'DELETE'],
    allowedHeaders: ['authorization', 'content-type', 'if-match', 'if-none-match', 'x-request-id'],
    exposedHeaders: ['x-request-id', 'location', 'etag', 'retry-after'],
    maxAge: PREFLIGHT_MAX_AGE_SECONDS
  })
}

export default fp(corsPlugin, { name: 'cors' })
