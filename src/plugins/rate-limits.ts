import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import type { RouteOperationId } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import type { AppConfig, RateLimit } from '../config.js'
import { rateLimited } from '../errors.js'
import type { Counted } from '../store/store.js'

interface RateLimitsPluginOptions {
  /** The limits of the public auth operations and of item writes; none when RATE_LIMIT=off. */
  limits: AppConfig['rateLimits']
}

type Hook = onRequestHookHandler

// Sign-in attempts count per client address and email too: guessing one account's password is slowed down more
// than signing in many accounts from one machine.
const loginKey = (request: FastifyRequest): string => {
  const { email } = request.body as { email: string }
  return `${request.ip}\n${emailKey(email)}`
}

// A store that cannot count fails the request (503 when it is unreachable): a limit that no longer holds would let
// guessing run free.
function verdict (outcome: Counted | Error, max: number): Error | undefined {
  if (outcome instanceof Error) return outcome
  return outcome.current > max ? rateLimited(Math.ceil(outcome.ttl / 1000)) : undefined
}

/**
 * Every request limit, by operationId, each counting in the store's counter of its own name (in Redis, shared by
 * every instance, with STORE=redis). Limits keyed by the client address are checked first, in `onRequest`, before
 * any body is read or password checked. The sign-in limit per address and email needs the email, and item writes
 * count per user, so those are checked in `preHandler`, after authentication, the role guard and validation: a
 * write counts only when it can succeed.
 *
 * The hooks are callbacks that count in the store directly: through @fastify/rate-limit's route hooks a limit
 * cost an item write about 12 000 instructions (bench:instructions), a tenth of the write.
 */
async function rateLimitsPlugin (app: FastifyInstance, options: RateLimitsPluginOptions): Promise<void> {
  if (options.limits === null) return
  const { login, loginAddress, register, refresh, writes } = options.limits
  const hookFor = (name: string, { max, windowSeconds }: RateLimit, keyOf: (request: FastifyRequest) => string): Hook => {
    const counter = app.store.rateCounter(name)
    const windowMs = windowSeconds * 1000
    return (request, _reply, done) => {
      counter.incr(keyOf(request), windowMs, max, (outcome) => { done(verdict(outcome, max)) })
    }
  }
  const byAddress = (request: FastifyRequest): string => request.ip
  const writesPerUser = hookFor('item-writes', writes, (request) => request.user.id)
  const hooks: Partial<Record<RouteOperationId, { onRequest?: Hook, preHandler?: Hook }>> = {
    registerUser: { onRequest: hookFor('register', register, byAddress) },
    loginUser: { onRequest: hookFor('login-address', loginAddress, byAddress), preHandler: hookFor('login', login, loginKey) },
    refreshTokens: { onRequest: hookFor('refresh', refresh, byAddress) },
    // Creates, edits and deletes count together against one limit per user: they are what makes the store grow.
    createItem: { preHandler: writesPerUser },
    updateItem: { preHandler: writesPerUser },
    deleteItem: { preHandler: writesPerUser }
  }
  app.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    const limits = operationId === undefined ? undefined : hooks[operationId]
    // The address limit goes before the route's own onRequest hooks (authentication): nothing runs for a caller
    // over it.
    if (limits?.onRequest !== undefined) route.onRequest = [limits.onRequest, ...[route.onRequest ?? []].flat()]
    if (limits?.preHandler !== undefined) route.preHandler = limits.preHandler
  })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits', dependencies: ['store'] })
