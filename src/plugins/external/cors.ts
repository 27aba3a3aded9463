import fastifyCors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { validationError } from '../app/errors.js'

interface CorsPluginOptions {
  /** The browser origins allowed to call the API (CORS_ORIGINS); none switches CORS off. */
  origins: readonly string[]
}

// How long a browser may reuse a preflight's answer.
const PREFLIGHT_MAX_AGE_SECONDS = 600
const PREFLIGHT_HEADERS = ['origin', 'access-control-request-method']

/**
 * Lets browser clients on the configured origins call the API: preflights answer 204, and the response headers a
 * client reads (the request id, Location, ETag, Retry-After, the rate-limit fields) are exposed to its scripts.
 */
async function corsPlugin (app: FastifyInstance, options: CorsPluginOptions): Promise<void> {
  if (options.origins.length === 0) return
  // @fastify/cors answers a preflight without Origin or Access-Control-Request-Method with a text/plain 400 of its
  // own: this hook, ahead of @fastify/cors's, answers it with the contract's ValidationErrorResponse instead.
  app.addHook('onRequest', (request, reply, done) => {
    if (request.method !== 'OPTIONS') return done()
    const missing = PREFLIGHT_HEADERS.filter((header) => request.headers[header] === undefined)
    if (missing.length === 0) return done()
    reply.code(400).send(validationError(missing.map((header) => ({ field: `headers.${header}`, issue: 'is required in a CORS preflight' }))))
  })
  await app.register(fastifyCors, {
    origin: [...options.origins],
    methods: ['GET', 'POST', 'PATCH', 'DELETE'],
    allowedHeaders: ['authorization', 'content-type', 'idempotency-key', 'if-match', 'if-none-match', 'x-request-id'],
    exposedHeaders: ['x-request-id', 'location', 'etag', 'idempotent-replayed', 'retry-after', 'ratelimit', 'ratelimit-policy'],
    maxAge: PREFLIGHT_MAX_AGE_SECONDS
  })
}

export default fp(corsPlugin, { name: 'cors' })
