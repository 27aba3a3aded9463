import fastifyRateLimit, { type RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import { rateLimited } from '../errors.js'
import { lockingRateLimitStore } from './locking-rate-limit-store.js'
import type { AppConfig, RateLimit } from '../config.js'

interface RateLimitsPluginOptions {
  /** The limits of the public auth operations; none when RATE_LIMIT=off. */
  limits: AppConfig['rateLimits']
}

// Keys the limiter keeps per limit, those under it and, as many again, those over it (which new keys cannot push
// out): about 300 bytes each with an email in the key, so at most 30 MB per limit.
const KEYS_PER_LIMIT = 50_000

// Creates, edits and deletes count together against one limit per user: they are what makes the store grow.
const ITEM_WRITES: ReadonlySet<RouteOperationId> = new Set(['createItem', 'updateItem', 'deleteItem'])

const limit = ({ max, windowSeconds }: RateLimit): RateLimitOptions => ({ max, timeWindow: windowSeconds * 1000 })

// Sign-in attempts count per client address and email too: guessing one account's password is slowed down more
// than signing in many accounts from one machine.
const loginKey = (request: FastifyRequest): string => {
  const { email } = request.body as { email: string }
  return `${request.ip}\n${emailKey(email)}`
}

/**
 * Every request limit, by operationId. Limits keyed by the client address are checked first, in `onRequest`,
 * before any body is read or password checked. The sign-in limit per address and email needs the email, and
 * item writes count per user, so those are checked in `preHandler`, after authentication and validation.
 */
async function rateLimitsPlugin (app: FastifyInstance, options: RateLimitsPluginOptions): Promise<void> {
  if (options.limits === null) return
  const { login, loginAddress, register, refresh, writes } = options.limits
  const perAddress: Partial<Record<RouteOperationId, RateLimitOptions>> = {
    loginUser: limit(loginAddress),
    registerUser: limit(register),
    refreshTokens: limit(refresh)
  }
  const Store = lockingRateLimitStore(KEYS_PER_LIMIT)
  // @fastify/rate-limit runs one route hook per request, so the second limit of a route is checked by a hook of
  // ours, which counts in a store of the same kind directly. Through app.createRateLimit it cost an item write
  // about 12 000 instructions (bench:instructions), a tenth of the write: promises, an awaited key generator,
  // a route-options object per request.
  const hookFor = ({ max, windowSeconds }: RateLimit, keyOf: (request: FastifyRequest) => string): preHandlerHookHandler => {
    const store = new Store()
    const timeWindow = windowSeconds * 1000
    return (request, _reply, done) => {
      store.incr(keyOf(request), (_error, counted) => {
        done(counted.current > max ? rateLimited(Math.ceil(counted.ttl / 1000)) : undefined)
      }, timeWindow, max)
    }
  }
  const loginPerEmail = hookFor(login, loginKey)
  // Each limit counts in a store of its own, so a key needs no prefix.
  const writesPerUser = hookFor(writes, (request) => request.user.id)
  // Added before @fastify/rate-limit's own onRoute hook, which reads the per-address limit from the route's config.
  app.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    const rateLimit = operationId === undefined ? undefined : perAddress[operationId]
    if (rateLimit !== undefined) route.config = { ...route.config, rateLimit }
    if (operationId === 'loginUser') route.preHandler = loginPerEmail
    // After authentication, the role guard and validation: the limit is the user's, and counts only writes that can succeed.
    if (operationId !== undefined && ITEM_WRITES.has(operationId)) route.preHandler = writesPerUser
  })
  await app.register(fastifyRateLimit, { global: false, store: Store })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits' })
