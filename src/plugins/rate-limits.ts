import fastifyRateLimit, { type RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import { rateLimited } from '../errors.js'
import type { AppConfig, RateLimit } from '../config.js'

interface RateLimitsPluginOptions {
  /** The limits of the public auth operations; none when RATE_LIMIT=off. */
  limits: AppConfig['rateLimits']
}

// Keys the limiter keeps per limit. Junk keys from one address are held back by the per-address limits, so
// pushing a locked key out takes this many keys from many addresses within one window.
const KEYS_PER_LIMIT = 50_000

const limit = ({ max, windowSeconds }: RateLimit): RateLimitOptions => ({ max, timeWindow: windowSeconds * 1000 })

// Sign-in attempts count per client address and email too: guessing one account's password is slowed down more
// than signing in many accounts from one machine.
const loginKey = (request: FastifyRequest): string => {
  const { email } = request.body as { email: string }
  return `login ${request.ip}\n${emailKey(email)}`
}

/**
 * Every request limit, by operationId. Limits keyed by the client address are checked first, in `onRequest`,
 * before any body is read or password checked; the sign-in limit per address and email needs the email, so it
 * is checked in `preHandler`, once the body has been validated.
 */
async function rateLimitsPlugin (app: FastifyInstance, options: RateLimitsPluginOptions): Promise<void> {
  if (options.limits === null) return
  const { login, loginAddress, register, refresh } = options.limits
  const perAddress: Partial<Record<RouteOperationId, RateLimitOptions>> = {
    loginUser: limit(loginAddress),
    registerUser: limit(register),
    refreshTokens: limit(refresh)
  }
  // Added before @fastify/rate-limit's own onRoute hook, which reads the per-address limit from the route's config.
  app.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    const rateLimit = operationId === undefined ? undefined : perAddress[operationId]
    if (rateLimit !== undefined) route.config = { ...route.config, rateLimit }
    if (operationId === 'loginUser') route.preHandler = loginPerEmail
  })
  await app.register(fastifyRateLimit, { global: false, cache: KEYS_PER_LIMIT })
  // A second limit on one route: @fastify/rate-limit's route hook runs once per request, so this one is checked here.
  const countLogin = app.createRateLimit({ ...limit(login), keyGenerator: loginKey })
  async function loginPerEmail (request: FastifyRequest): Promise<void> {
    const counted = await countLogin(request)
    if (!counted.isAllowed && counted.isExceeded) throw rateLimited(counted.ttlInSeconds)
  }
}

export default fp(rateLimitsPlugin, { name: 'rate-limits' })
