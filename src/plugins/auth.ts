import fastifyJwt from '@fastify/jwt'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { Counter, Gauge } from 'prom-client'
import type { HashingProcess } from '../auth/hashing-process.js'
import { createPasswords, type Passwords, type QueueObserver } from '../auth/passwords.js'
import { PerKeyQueue } from '../auth/per-key-queue.js'
import type { Principal } from '../auth/principal.js'
import { type AccessTokenClaims, Tokens } from '../auth/tokens.js'
import { VerifiedTokens } from '../auth/verified-tokens.js'
import type { AppConfig } from '../config.js'
import { type ApiError, forbidden, unauthorized } from '../errors.js'
import type { Role, Session, User } from '../domain.js'
import { randomUuid } from '../runtime/uuid.js'

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: AccessTokenClaims
    user: Principal
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** onRequest hook: rejects the request with 401 unless it carries a valid access token of a live session. */
    authenticate: onRequestHookHandler
    passwords: Passwords
    /** Registrations of one email key, one at a time. */
    registrations: PerKeyQueue
    /** Issues, refreshes and revokes token pairs (the sessions they belong to are in `store.sessions`). */
    tokens: Tokens
  }
}

type AuthPluginOptions = Pick<AppConfig, 'jwt' | 'refreshTokenTtlSeconds' | 'refreshReuseLeewaySeconds' | 'maxSessionsPerUser' | 'sessionSweepIntervalMs' | 'passwordQueueLimit' | 'passwordHashCost'> & {
  /** See BuildAppOptions.hashingProcess. */
  hashingProcess?: HashingProcess
}

// Sessions forgotten per sweep at most, so a sweep never holds the event loop for long (about a millisecond).
const SESSIONS_PER_SWEEP = 10_000

type VerifiedClaims = AccessTokenClaims & { readonly exp: number, readonly iat: number }

// How far another clock (an instance of the service) may run ahead when a token says when it was issued.
const CLOCK_TOLERANCE_SECONDS = 30

const BEARER = /^Bearer[ ]+(\S*)$/i

const tokenRequired = (): ApiError => unauthorized('AUTHENTICATION_REQUIRED', 'An access token is required.')
const invalidToken = (): ApiError => unauthorized('INVALID_TOKEN', 'The access token is invalid.')

function bearerToken (header: string): string {
  if (!/^Bearer\b/i.test(header)) throw tokenRequired()
  const token = BEARER.exec(header)?.[1]
  if (!token) throw unauthorized('INVALID_TOKEN', 'The access token is malformed.')
  return token
}

// Verified tokens kept in memory at most, in bytes of token (their claims are a few hundred bytes more each).
const VERIFIED_TOKEN_BYTES = 4 * 1024 * 1024

const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const isUuid = (value: unknown): value is string => typeof value === 'string' && CANONICAL_UUID.test(value)
const isSeconds = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0

/**
 * The claims of a token whose signature, issuer and audience have passed, if each has the type and form of those
 * this service issues: fast-jwt checks a claim's presence, and compares `exp` and `nbf` as numbers only when they
 * are numbers, so a signed `"iat": "soon"` would pass every check below it unseen.
 */
function accessClaims (payload: Record<string, unknown>): VerifiedClaims | undefined {
  const { sub, sid, jti, typ, iat, exp } = payload
  if (!isUuid(sub) || !isUuid(sid) || !isUuid(jti) || typ !== 'access' || !isSeconds(iat) || !isSeconds(exp)) return undefined
  return { sub, sid, jti, typ, iat, exp }
}

/** onRequest hook for operations with `x-roles`: runs after authenticate, before the body is read. */
export function requireRole (roles: readonly Role[]): onRequestHookHandler {
  return (request, _reply, done) => {
    done(roles.includes(request.user.role) ? undefined : forbidden(`This operation is open to ${roles.join(', ')} users only.`))
  }
}

/** The sign-in queue's metrics, and one warning when it fills (one line, however many it then refuses) and one line when it empties. */
function signInQueueObserver (app: FastifyInstance, maxWaiting: number): QueueObserver {
  const waiting = new Gauge({ name: 'items_service_signin_queue_waiting', help: 'Sign-ins and registrations waiting for a password hash.', registers: [app.metrics] })
  const refused = new Counter({ name: 'items_service_signin_refused_total', help: 'Sign-ins and registrations refused with 503: the queue was full.', registers: [app.metrics] })
  let full = false
  return {
    waiting: (count) => {
      waiting.set(count)
      if (count > 0 || !full) return
      full = false
      app.log.info('the sign-in queue has emptied')
    },
    refused: () => {
      refused.inc()
      if (full) return
      full = true
      app.log.warn({ waiting: maxWaiting, passwordQueueLimit: maxWaiting }, 'sign-in queue full: refusing sign-ins and registrations with 503 until it empties')
    }
  }
}

async function authPlugin (app: FastifyInstance, options: AuthPluginOptions): Promise<void> {
  const { secret, issuer, audience, accessTokenTtlSeconds } = options.jwt
  await app.register(fastifyJwt, {
    secret,
    sign: { algorithm: 'HS256', iss: issuer, aud: audience, expiresIn: accessTokenTtlSeconds },
    // Pinning the algorithm rejects `alg: none` and any other algorithm a forger puts in the header.
    verify: {
      algorithms: ['HS256'],
      allowedIss: issuer,
      allowedAud: audience,
      requiredClaims: ['exp', 'iat', 'sub', 'sid', 'jti', 'typ']
    }
  })

  app.decorate('passwords', createPasswords({ maxWaiting: options.passwordQueueLimit, observer: signInQueueObserver(app, options.passwordQueueLimit), hashingProcess: options.hashingProcess, hashCost: options.passwordHashCost }))
  app.decorate('registrations', new PerKeyQueue())
  // onClose runs once the server has stopped and every request in flight has been answered.
  app.addHook('onClose', async () => { await app.passwords.close() })
  app.decorate('tokens', new Tokens({
    store: app.store,
    signAccessToken: (claims) => app.jwt.sign(claims),
    accessTokenTtlSeconds,
    refreshTokenTtlSeconds: options.refreshTokenTtlSeconds,
    refreshReuseLeewaySeconds: options.refreshReuseLeewaySeconds,
    maxSessionsPerUser: options.maxSessionsPerUser
  }))

  // Ended sessions are forgotten when next looked up, and by this sweep, so that no session outlives its end by
  // more than an interval however many sign-ins never come back.
  const sweeper = setInterval(() => {
    app.store.sessions.sweep(app.store.now(), SESSIONS_PER_SWEEP).catch((err: unknown) => { app.log.error({ err }, 'session sweep failed') })
  }, options.sessionSweepIntervalMs).unref()
  app.addHook('onClose', async () => { clearInterval(sweeper) })

  // Revocation is still checked on every request, against the session: the cache only skips the signature. Every
  // token this service signs has the same length (uuids, and times of ten digits until 2286); a longer one was not
  // issued by it, and is refused before it is verified or kept.
  const maxTokenLength = app.jwt.sign({ sub: randomUuid(), sid: randomUuid(), jti: randomUuid(), typ: 'access' }).length
  const verifiedTokens = new VerifiedTokens<VerifiedClaims>({ maxBytes: VERIFIED_TOKEN_BYTES, maxTokenLength })
  // eslint-disable-next-line no-new -- registered in the registry, which reads it
  new Gauge({
    name: 'items_service_verified_tokens',
    help: `Access tokens whose verification is kept (at most ${verifiedTokens.capacity}, of at most ${maxTokenLength} bytes each).`,
    registers: [app.metrics],
    collect () { this.set(verifiedTokens.size) }
  })
  // app.jwt.verify with no per-call options reuses one prebuilt fast-jwt verifier; request.jwtVerify() would
  // rebuild its options and run a callback chain on every request.
  const verify = (token: string, header: string, connection: object): VerifiedClaims => {
    if (token.length > maxTokenLength) throw invalidToken()
    let claims: VerifiedClaims | undefined
    try {
      claims = accessClaims(app.jwt.verify<Record<string, unknown>>(token))
    } catch (error) {
      if ((error as { code?: string }).code === 'FAST_JWT_EXPIRED') {
        throw unauthorized('TOKEN_EXPIRED', 'The access token has expired.')
      }
      throw invalidToken()
    }
    // fast-jwt checks exp and nbf only. A token issued in the future, or living longer than this service issues
    // them, was not issued by it, whatever its signature says (a leaked secret, or a misconfigured twin).
    if (claims === undefined || claims.iat > Date.now() / 1000 + CLOCK_TOLERANCE_SECONDS || claims.exp - claims.iat > accessTokenTtlSeconds) {
      throw invalidToken()
    }
    verifiedTokens.remember(token, header, connection, claims)
    return claims
  }

  // The caller a token speaks for, while its session lives and is still its user's.
  const principalOf = (claims: VerifiedClaims, session: Session | undefined, user: User | undefined): Principal | undefined =>
    session?.userId === claims.sub && user !== undefined ? { id: user.id, role: user.role, sessionId: session.id } : undefined
  const sessionEnded = (): ApiError => unauthorized('INVALID_TOKEN', 'The session of this access token has ended.')
  // What the store cannot tell at once: a session or user that this instance has not read yet (Redis), a session
  // that has ended.
  const askStore = async (claims: VerifiedClaims): Promise<Principal> => {
    const session = await app.store.sessions.get(claims.sid, app.store.now())
    const user = session?.userId === claims.sub ? await app.store.users.get(claims.sub) : undefined
    const principal = principalOf(claims, session, user)
    if (principal === undefined) throw sessionEnded()
    return principal
  }

  // The caller, when the store has their session and user at hand, or else the claims to ask the store about.
  // Throws the 401 of a missing, malformed, invalid or expired token. A token's times are by this process's clock
  // (as the instance that signed it read its own); a session's are by the store's, which every instance shares.
  const identify = (request: FastifyRequest): Principal | VerifiedClaims => {
    const { authorization } = request.headers
    if (authorization === undefined) throw tokenRequired()
    const connection = request.raw.socket
    const now = Date.now()
    let claims = verifiedTokens.byConnection(authorization, connection, now)
    if (claims === undefined) {
      const token = bearerToken(authorization)
      claims = verifiedTokens.get(token, authorization, connection, now) ?? verify(token, authorization, connection)
    }
    return principalOf(claims, app.store.sessions.cached(claims.sid, app.store.now()), app.store.users.cached(claims.sub)) ?? claims
  }

  // A hook with a callback rather than an async function, so that a request whose session and user the store has
  // at hand goes on without a promise (see `Store`); every refusal goes through `done`.
  app.decorate('authenticate', function authenticate (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) {
    let identified: Principal | VerifiedClaims
    try {
      identified = identify(request)
    } catch (error) {
      done(error as Error)
      return
    }
    if (!('typ' in identified)) {
      request.user = identified
      done()
      return
    }
    askStore(identified).then((principal) => {
      request.user = principal
      done()
    }, done)
  })
}

export default fp(authPlugin, { name: 'auth', dependencies: ['store', 'metrics'] })
