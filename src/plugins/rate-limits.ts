import fastifyRateLimit, { type RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import type { AppConfig, RateLimit } from '../config.js'

interface RateLimitsPluginOptions {
  /** The limits of the public auth operations; none when RATE_LIMIT=off. */
  limits: AppConfig['rateLimits']
}

const limit = ({ max, windowSeconds }: RateLimit): RateLimitOptions => ({ max, timeWindow: windowSeconds * 1000 })

// Sign-in attempts count per client address and email: guessing one account's password is slowed down, while a
// test rig signing in many accounts from one machine is not.
const loginKey = (request: FastifyRequest): string => {
  const { email } = request.body as { email: string }
  return `${request.ip}\n${emailKey(email)}`
}

/**
 * Every request limit, by operationId. Limits keyed by the client address alone are checked first, in `onRequest`;
 * the sign-in limit needs the email, so it is checked in `preHandler`, once the body has been validated.
 */
async function rateLimitsPlugin (app: FastifyInstance, options: RateLimitsPluginOptions): Promise<void> {
  if (options.limits === null) return
  const { login, register, refresh } = options.limits
  const limits: Partial<Record<RouteOperationId, RateLimitOptions>> = {
    loginUser: { ...limit(login), hook: 'preHandler', keyGenerator: loginKey },
    registerUser: limit(register),
    refreshTokens: limit(refresh)
  }
  // Registered before @fastify/rate-limit, whose own onRoute hook reads the limit from the route's config.
  app.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    const rateLimit = operationId === undefined ? undefined : limits[operationId]
    if (rateLimit !== undefined) route.config = { ...route.config, rateLimit }
  })
  await app.register(fastifyRateLimit, { global: false })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits' })
