import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest, onRequestHookHandler, onResponseHookHandler, onSendHookHandler } from 'fastify'
import type { RateLimitName } from '../../generated/routes.js'
import { emailKey } from '../auth/email.js'
import type { AppConfig, RateLimit } from '../config/config.js'
import { ApiError, rateLimited } from '../errors.js'
import type { Counted, RateCounter, WriteLimit } from '../store/store.js'
import type { StepFor } from './step.js'
import type { Metrics } from '../observability/metrics.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** What is left of each limit that counted this request, in the order they counted it; null before any did. */
    rateLimitStatus: RateLimitStatus[] | null
    /** The limit that the store counts the request's write against, in the write's own step; null when none does. */
    writeLimit: WriteLimit | null
  }
}

interface RateLimitStatus {
  readonly policy: RateLimitName
  readonly max: number
  readonly counted: Counted
  /** The key this request's hit counted under, when a 503 would take it back. */
  readonly refundKey: string | undefined
}

interface RateLimitsOptions {
  /** The limits of the public auth operations and of item writes; none when RATE_LIMIT=off. */
  readonly limits: AppConfig['rateLimits']
  readonly metrics: Metrics
}

/** The limits each operation declares in the contract (`x-rate-limits`), as two steps of its pipeline. */
export interface RateLimitSteps {
  /** Names the route's limits on every response, and counts those keyed by the client address alone. */
  readonly byAddress: StepFor
  /** Counts the limits keyed by what the request says (its email) or by who the caller is. */
  readonly byCaller: StepFor
}

type Hook = onRequestHookHandler

// By its digest: every key is of one size whatever email a caller sends (the store keeps a bounded number of keys,
// each of bounded bytes), and one line of printable ASCII, which an operator's `redis-cli --scan` lists.
const signInEmail = (request: FastifyRequest): string => createHash('sha256').update(emailKey((request.body as { email: string }).email)).digest('base64url')

// A store that cannot count fails the request (503 when it is unreachable): a limit that no longer holds would let
// guessing run free.
function verdict (name: RateLimitName, outcome: Counted | Error, max: number): Error | undefined {
  if (outcome instanceof Error) return outcome
  return outcome.current > max ? rateLimited(name, Math.ceil(outcome.ttl / 1000)) : undefined
}

const isRateLimited = (error: Error | undefined): boolean => error instanceof ApiError && error.statusCode === 429

// The IETF draft's Structured Fields items (draft-ietf-httpapi-ratelimit-headers-10).
const policyItem = (name: RateLimitName, { max, windowSeconds }: RateLimit): string => `"${name}";q=${max};w=${windowSeconds}`
const statusItem = ({ policy, max, counted }: RateLimitStatus): string =>
  `"${policy}";r=${Math.max(0, max - counted.current)};t=${Math.ceil(counted.ttl / 1000)}`

/**
 * Notes what is left of `policy` after counting this request, and says it in the RateLimit field at once: set as
 * each limit counts, rather than by an onSend hook, which a write's route otherwise has none of (running one costs
 * it more than the rest of the limit).
 */
function recordStatus (request: FastifyRequest, reply: FastifyReply, entry: RateLimitStatus): void {
  const status = request.rateLimitStatus ?? (request.rateLimitStatus = [])
  status.push(entry)
  reply.header('ratelimit', status.length === 1 ? statusItem(status[0]!) : status.map(statusItem).join(', '))
}

const byAddress = (request: FastifyRequest): string => request.clientAddress

// A request's limit counted by the store in its write (WriteLimit): one object a write, its methods shared.
class WriteLimitOfRequest implements WriteLimit {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #refused: () => void

  constructor (readonly name: RateLimitName, readonly key: string, readonly max: number, readonly windowMs: number, request: FastifyRequest, reply: FastifyReply, refused: () => void) {
    this.#request = request
    this.#reply = reply
    this.#refused = refused
  }

  counted (counted: Counted): void {
    recordStatus(this.#request, this.#reply, { policy: this.name, max: this.max, counted, refundKey: undefined })
    if (counted.current > this.max) this.#refused()
  }

  refusal (counted: Counted): Error {
    return rateLimited(this.name, Math.ceil(counted.ttl / 1000))
  }
}

interface Counting {
  /** The key a request counts under; undefined when this limit does not count it. */
  readonly keyOf: (request: FastifyRequest) => string | undefined
  /**
   * When the request counts. Keyed by the client address alone: in `onRequest`, before authentication and before
   * any body is read or password checked. The sign-in's: after validation (a sign-in has no authentication), once
   * its email is valid. An item write's: by the store, in the write's own atomic step (so that it costs no step of
   * its own), once nothing but the store's room stands in its way (a write refused for its item, its owner, its
   * If-Match or the quota counts against nothing).
   */
  readonly counts: 'on arrival' | 'once valid' | 'in the write'
  /** A sign-in or registration answered 503 was not served, so its hit is taken back: a client refused in a burst is not locked out. */
  readonly refundable: boolean
}

// How each limit the contract names counts (an IPv6 client by its network, `request.clientAddress`). The account
// limit, login-failures, counts only failed sign-ins, once answered, and is not among them.
const COUNTING: Record<Exclude<RateLimitName, 'login-failures'>, Counting> = {
  register: { keyOf: byAddress, counts: 'on arrival', refundable: true },
  // One key for the whole service, once the registration is valid. A sandbox's registrations fill only its own
  // accounts: they are not counted.
  registrations: { keyOf: (request) => request.scopedStore === null ? 'service' : undefined, counts: 'once valid', refundable: true },
  'login-address': { keyOf: byAddress, counts: 'on arrival', refundable: true },
  login: { keyOf: (request) => `${request.clientAddress}|${signInEmail(request)}`, counts: 'once valid', refundable: true },
  refresh: { keyOf: byAddress, counts: 'on arrival', refundable: false },
  // Creates, edits and deletes count together against one limit per user: they are what makes the store grow.
  'item-writes': { keyOf: (request) => request.user.id, counts: 'in the write', refundable: false }
}

/**
 * The limits of the operations that declare them (`x-rate-limits` in the contract), each counting in the
 * request's store's counter of its own name (in Redis, shared by every instance, with STORE=redis); see COUNTING for what
 * each is keyed by and when it counts. The account limit (login-failures) counts failed sign-ins only, once
 * answered (before the answer leaves, so that any instance asked next sees it), and a success clears it: parallel
 * sign-ins with the right password are never refused by it.
 *
 * Every response of a limited operation carries the IETF draft's RateLimit-Policy field (its limits), and
 * RateLimit (what is left of each limit that counted the request) once one has: of the limits keyed by the caller
 * (its address, its address and the email it gives, its own account) only. The account limit of a sign-in counts
 * the failures of whoever tried that email, so no field says it, or a stranger would read them.
 *
 * Hand-written rather than @fastify/rate-limit (which can count only failed sign-ins, with `increment: false`): its
 * store cannot take back the hit of a request answered 503, nor count one inside the write's own atomic step, and it
 * writes the draft's older separate fields (RateLimit-Limit, -Remaining, -Reset), not the RateLimit and
 * RateLimit-Policy lists of a route's several limits.
 */
export function rateLimits ({ limits, metrics }: RateLimitsOptions): RateLimitSteps {
  if (limits === null) return { byAddress: () => undefined, byCaller: () => undefined }
  const { login, loginAddress, loginFailures, register, refresh, writes, registrations } = limits
  const limitsByName: Record<RateLimitName, RateLimit> = {
    register, registrations, 'login-address': loginAddress, login, 'login-failures': loginFailures, refresh, 'item-writes': writes
  }
  const refusals = metrics.counter<'limit'>({
    name: 'items_service_rate_limited_total',
    help: 'Requests refused with 429, by the limit they passed (its counter\'s name).',
    labelNames: ['limit']
  })
  const hookFor = (name: Exclude<RateLimitName, 'login-failures'>): Hook => {
    const { max, windowSeconds } = limitsByName[name]
    const { keyOf, refundable } = COUNTING[name]
    const windowMs = windowSeconds * 1000
    return (request, reply, done) => {
      const key = keyOf(request)
      if (key === undefined) return done()
      request.store.rateCounter(name).incr(key, windowMs, max, (outcome) => {
        const refused = verdict(name, outcome, max)
        if (!(outcome instanceof Error)) {
          recordStatus(request, reply, { policy: name, max, counted: outcome, refundKey: refused === undefined && refundable ? key : undefined })
        }
        if (isRateLimited(refused)) refusals.inc({ limit: name })
        done(refused)
      })
    }
  }
  // Hands the limit to the store, which counts it in the write's own step.
  const writeLimitFor = (name: Exclude<RateLimitName, 'login-failures'>): Hook => {
    const { max, windowSeconds } = limitsByName[name]
    const { keyOf } = COUNTING[name]
    const windowMs = windowSeconds * 1000
    const limitRefused = (): void => { refusals.inc({ limit: name }) }
    return (request, reply, done) => {
      const key = keyOf(request)
      if (key !== undefined) request.writeLimit = new WriteLimitOfRequest(name, key, max, windowMs, request, reply, limitRefused)
      done()
    }
  }
  const warnIfFailed = (request: FastifyRequest, what: string) => (err: unknown): void => {
    request.log.warn({ err }, `${what} failed; the limit counts the request`)
  }
  // A 503 was not served: every hit it counted is taken back.
  const refundUnserved: onResponseHookHandler = (request, reply, done) => {
    if (reply.statusCode === 503) {
      for (const { policy, refundKey } of request.rateLimitStatus ?? []) {
        if (refundKey !== undefined) request.store.rateCounter(policy).refund(refundKey).catch(warnIfFailed(request, 'taking back a rate-limit hit'))
      }
    }
    done()
  }
  const failures = (request: FastifyRequest): RateCounter => request.store.rateCounter('login-failures')
  const failuresWindowMs = loginFailures.windowSeconds * 1000
  const accountNotLocked: Hook = (request, _reply, done) => {
    failures(request).peek(signInEmail(request), failuresWindowMs, (outcome) => {
      if (outcome instanceof Error) return done(outcome)
      const locked = outcome !== undefined && outcome.current >= loginFailures.max
      if (locked) refusals.inc({ limit: 'login-failures' })
      done(locked ? rateLimited('login-failures', Math.ceil(outcome.ttl / 1000)) : undefined)
    })
  }
  // A failed sign-in counts against its account; one that succeeds clears the account's failures.
  const countFailure: onSendHookHandler = (request, reply, payload, done) => {
    const warn = warnIfFailed(request, 'counting a sign-in failure')
    if (reply.statusCode === 401) {
      failures(request).incr(signInEmail(request), failuresWindowMs, loginFailures.max, (outcome) => {
        if (outcome instanceof Error) warn(outcome)
        done(null, payload)
      })
    } else if (reply.statusCode === 200) {
      failures(request).reset(signInEmail(request)).catch(warn).finally(() => { done(null, payload) })
    } else {
      done(null, payload)
    }
  }
  // The first hook of a limited route: every response it sends names its limits, whatever refuses it; but the
  // account limit, whose count is anyone's failures to sign in to that account, shown to nobody.
  const namePolicies = (names: readonly RateLimitName[]): Hook => {
    const field = names.flatMap((name) => name === 'login-failures' ? [] : [policyItem(name, limitsByName[name])]).join(', ')
    return (_request, reply, done) => {
      reply.header('ratelimit-policy', field)
      done()
    }
  }
  const counting = (names: readonly RateLimitName[], when: Counting['counts']): Array<Exclude<RateLimitName, 'login-failures'>> =>
    names.flatMap((name) => name !== 'login-failures' && COUNTING[name].counts === when ? [name] : [])
  return {
    byAddress: ({ rateLimits: names }) => {
      if (names.length === 0) return undefined
      const refundable = names.some((name) => name !== 'login-failures' && COUNTING[name].refundable)
      return {
        onRequest: [namePolicies(names), ...counting(names, 'on arrival').map(hookFor)],
        ...(refundable ? { onResponse: [refundUnserved] } : {})
      }
    },
    byCaller: ({ rateLimits: names }) => {
      const countsFailures = names.includes('login-failures')
      const preHandler = [
        ...counting(names, 'once valid').map(hookFor),
        ...counting(names, 'in the write').map(writeLimitFor),
        ...(countsFailures ? [accountNotLocked] : [])
      ]
      if (preHandler.length === 0) return undefined
      return { preHandler, ...(countsFailures ? { onSend: [countFailure] } : {}) }
    }
  }
}
