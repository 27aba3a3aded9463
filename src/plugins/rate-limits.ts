import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, onResponseHookHandler, onSendHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { Counter } from 'prom-client'
import type { RouteOperationId } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import type { AppConfig, RateLimit } from '../config.js'
import { ApiError, rateLimited } from '../errors.js'
import type { Counted, RateCounter } from '../store/store.js'
import { appendedHooks } from './route-hooks.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** What is left of each limit that counted this request, in the order they counted it; null before any did. */
    rateLimitStatus: RateLimitStatus[] | null
  }
}

interface RateLimitStatus {
  readonly policy: LimitName
  readonly max: number
  /** Undefined while the limit's window has counted nothing. */
  counted: Counted | undefined
}

interface RateLimitsPluginOptions {
  /** The limits of the public auth operations and of item writes; none when RATE_LIMIT=off. */
  limits: AppConfig['rateLimits']
}

type Hook = onRequestHookHandler

type LimitName = 'register' | 'login-address' | 'login' | 'login-failures' | 'refresh' | 'item-writes'

/**
 * The limits each limited operation counts against, by name (its counter's, in the store, and in the RateLimit
 * fields); every response of these operations declares the RateLimit fields in the contract.
 */
export const OPERATION_LIMITS = {
  registerUser: ['register'],
  loginUser: ['login-address', 'login', 'login-failures'],
  refreshTokens: ['refresh'],
  // Creates, edits and deletes count together against one limit per user: they are what makes the store grow.
  createItem: ['item-writes'],
  updateItem: ['item-writes'],
  deleteItem: ['item-writes']
} as const satisfies Partial<Record<RouteOperationId, readonly LimitName[]>>

type LimitedOperation = keyof typeof OPERATION_LIMITS

interface RouteLimits {
  onRequest?: Hook
  preHandler?: Hook[]
  onSend?: onSendHookHandler
  onResponse?: onResponseHookHandler[]
}

const signInEmail = (request: FastifyRequest): string => emailKey((request.body as { email: string }).email)

// A store that cannot count fails the request (503 when it is unreachable): a limit that no longer holds would let
// guessing run free.
function verdict (outcome: Counted | Error, max: number): Error | undefined {
  if (outcome instanceof Error) return outcome
  return outcome.current > max ? rateLimited(Math.ceil(outcome.ttl / 1000)) : undefined
}

const isRateLimited = (error: Error | undefined): boolean => error instanceof ApiError && error.statusCode === 429

// The IETF draft's Structured Fields items (draft-ietf-httpapi-ratelimit-headers-10).
const policyItem = (name: LimitName, { max, windowSeconds }: RateLimit): string => `"${name}";q=${max};w=${windowSeconds}`
const statusItem = ({ policy, max, counted }: RateLimitStatus): string => counted === undefined
  ? `"${policy}";r=${max}`
  : `"${policy}";r=${Math.max(0, max - counted.current)};t=${Math.ceil(counted.ttl / 1000)}`

/**
 * Notes what is left of `policy` after counting this request, and says it in the RateLimit field at once: set as
 * each limit counts, rather than by an onSend hook, which a write's route otherwise has none of (running one costs
 * it more than the rest of the limit).
 */
function recordStatus (request: FastifyRequest, reply: FastifyReply, policy: LimitName, max: number, counted: Counted | undefined): void {
  const status = request.rateLimitStatus ?? (request.rateLimitStatus = [])
  const known = status.find((entry) => entry.policy === policy)
  if (known === undefined) status.push({ policy, max, counted })
  else known.counted = counted
  reply.header('ratelimit', status.length === 1 ? statusItem(status[0]!) : status.map(statusItem).join(', '))
}

// The first hook of a limited route: every response it sends names its limits, whatever refuses it.
const namePolicies = (policyField: string): Hook => (_request, reply, done) => {
  reply.header('ratelimit-policy', policyField)
  done()
}

/**
 * Every request limit, by operationId, each counting in the store's counter of its own name (in Redis, shared by
 * every instance, with STORE=redis). Limits keyed by the client address (`request.clientAddress`: an IPv6 client by
 * its network) are checked first, in `onRequest`, before any body is read or password checked. The sign-in limits
 * need the email: per address and email, and per account whatever the address. Item writes count per user. Those
 * are checked in `preHandler`, after authentication, the role guard and validation: a write counts only when it can
 * succeed. The account limit counts failed sign-ins only, once answered (before the answer leaves, so that any
 * instance asked next sees it), and a success clears it: parallel sign-ins with the right password are never
 * refused by it.
 *
 * A sign-in or registration answered 503 (the hashing queue was full, the client had gone, the store was
 * unreachable) was not served, so what it counted is taken back: a client refused in a burst is not locked out.
 *
 * Every response of a limited operation carries the IETF draft's RateLimit-Policy field (its limits), and
 * RateLimit (what is left of each limit that counted the request) once one has.
 *
 * Hand-written rather than @fastify/rate-limit: it counts every request it sees before the handler, and cannot
 * count only the failed sign-ins (peek first, count the 401) nor take back the hit of a request answered 503.
 */
async function rateLimitsPlugin (app: FastifyInstance, options: RateLimitsPluginOptions): Promise<void> {
  if (options.limits === null) return
  const { login, loginAddress, loginFailures, register, refresh, writes } = options.limits
  const limitsByName: Record<LimitName, RateLimit> = {
    register, 'login-address': loginAddress, login, 'login-failures': loginFailures, refresh, 'item-writes': writes
  }
  app.decorateRequest('rateLimitStatus', null)
  const refusals = new Counter<'limit'>({
    name: 'items_service_rate_limited_total',
    help: 'Requests refused with 429, by the limit they passed (its counter\'s name).',
    labelNames: ['limit'],
    registers: [app.metrics]
  })
  // The hits each sign-in and registration counted, while it is in flight.
  const counted = new WeakMap<FastifyRequest, Array<{ counter: RateCounter, key: string }>>()
  const hookFor = (name: LimitName, keyOf: (request: FastifyRequest) => string, refundable = false): Hook => {
    const { max, windowSeconds } = limitsByName[name]
    const counter = app.store.rateCounter(name)
    const windowMs = windowSeconds * 1000
    return (request, reply, done) => {
      const key = keyOf(request)
      counter.incr(key, windowMs, max, (outcome) => {
        const refused = verdict(outcome, max)
        if (!(outcome instanceof Error)) recordStatus(request, reply, name, max, outcome)
        if (isRateLimited(refused)) refusals.inc({ limit: name })
        if (refused === undefined && refundable) counted.set(request, [...counted.get(request) ?? [], { counter, key }])
        done(refused)
      })
    }
  }
  const warnIfFailed = (request: FastifyRequest, what: string) => (err: unknown): void => {
    request.log.warn({ err }, `${what} failed; the limit counts the request`)
  }
  // A 503 was not served: every hit it counted is taken back.
  const refundUnserved: onResponseHookHandler = (request, reply, done) => {
    if (reply.statusCode === 503) {
      for (const { counter, key } of counted.get(request) ?? []) counter.refund(key).catch(warnIfFailed(request, 'taking back a rate-limit hit'))
    }
    done()
  }
  const failures = app.store.rateCounter('login-failures')
  const failuresWindowMs = loginFailures.windowSeconds * 1000
  const accountNotLocked: Hook = (request, reply, done) => {
    failures.peek(signInEmail(request), failuresWindowMs, (outcome) => {
      if (outcome instanceof Error) return done(outcome)
      recordStatus(request, reply, 'login-failures', loginFailures.max, outcome)
      const locked = outcome !== undefined && outcome.current >= loginFailures.max
      if (locked) refusals.inc({ limit: 'login-failures' })
      done(locked ? rateLimited(Math.ceil(outcome.ttl / 1000)) : undefined)
    })
  }
  // A failed sign-in counts against its account; one that succeeds clears the account's failures.
  const countFailure: onSendHookHandler = (request, reply, payload, done) => {
    const warn = warnIfFailed(request, 'counting a sign-in failure')
    if (reply.statusCode === 401) {
      failures.incr(signInEmail(request), failuresWindowMs, loginFailures.max, (outcome) => {
        if (outcome instanceof Error) warn(outcome)
        else recordStatus(request, reply, 'login-failures', loginFailures.max, outcome)
        done(null, payload)
      })
    } else if (reply.statusCode === 200) {
      recordStatus(request, reply, 'login-failures', loginFailures.max, undefined)
      failures.reset(signInEmail(request)).catch(warn).finally(() => { done(null, payload) })
    } else {
      done(null, payload)
    }
  }
  const byAddress = (request: FastifyRequest): string => request.clientAddress
  const writesPerUser = hookFor('item-writes', (request) => request.user.id)
  const limits: Record<LimitedOperation, RouteLimits> = {
    registerUser: { onRequest: hookFor('register', byAddress, true), onResponse: [refundUnserved] },
    loginUser: {
      onRequest: hookFor('login-address', byAddress, true),
      preHandler: [hookFor('login', (request) => `${request.clientAddress}\n${signInEmail(request)}`, true), accountNotLocked],
      onSend: countFailure,
      onResponse: [refundUnserved]
    },
    refreshTokens: { onRequest: hookFor('refresh', byAddress) },
    createItem: { preHandler: [writesPerUser] },
    updateItem: { preHandler: [writesPerUser] },
    deleteItem: { preHandler: [writesPerUser] }
  }
  const isLimited = (operationId: RouteOperationId | undefined): operationId is LimitedOperation =>
    operationId !== undefined && operationId in limits
  app.addHook('onRoute', (route) => {
    const operationId = route.config?.operationId
    if (!isLimited(operationId)) return
    const routeLimits = limits[operationId]
    // The address limit goes before the route's own onRequest hooks (authentication): nothing runs for a caller
    // over it. The others are appended to the route's own.
    const policies = namePolicies(OPERATION_LIMITS[operationId].map((name) => policyItem(name, limitsByName[name])).join(', '))
    route.onRequest = [policies, ...(routeLimits.onRequest === undefined ? [] : [routeLimits.onRequest]), ...appendedHooks(route.onRequest)]
    if (routeLimits.preHandler !== undefined) route.preHandler = appendedHooks(route.preHandler, ...routeLimits.preHandler)
    if (routeLimits.onSend !== undefined) route.onSend = appendedHooks(route.onSend, routeLimits.onSend)
    if (routeLimits.onResponse !== undefined) route.onResponse = appendedHooks(route.onResponse, ...routeLimits.onResponse)
  })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits', dependencies: ['store', 'client-address', 'metrics'] })
