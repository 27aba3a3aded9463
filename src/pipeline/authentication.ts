import { timingSafeEqual } from 'node:crypto'
import type { JWT } from '@fastify/jwt'
import type { FastifyRequest, onRequestHookHandler } from 'fastify'
import type { Principal } from '../auth/principal.js'
import type { AccessTokenClaims } from '../auth/tokens.js'
import { VerifiedTokens } from '../auth/verified-tokens.js'
import type { Session, User } from '../domain/index.js'
import { type ApiError, sessionEnded, unauthorized } from '../errors.js'
import { randomUuid } from '../runtime/uuid.js'
import type { ServingStore } from '../store/store.js'
import type { ContractRoute, StepFor } from './step.js'
import type { Metrics } from '../observability/metrics.js'

const BEARER = /^Bearer[ ]+(\S*)$/i

/**
 * The token of an Authorization field of the Bearer scheme (RFC 6750): undefined when the field names another
 * scheme or none, empty when it names Bearer but carries no single token.
 */
function bearerToken (header: string): string | undefined {
  if (!/^Bearer\b/i.test(header)) return undefined
  return BEARER.exec(header)?.[1] ?? ''
}

/**
 * The step of every operation under a security requirement: the hook of its scheme, by the scheme's name in the
 * contract's `components.securitySchemes`. A scheme with no hook, or a choice between schemes (which no operation
 * offers yet), fails at start rather than letting a request through unchecked.
 */
export function authentication (schemes: Readonly<Record<string, onRequestHookHandler>>): StepFor<ContractRoute> {
  return (route) => {
    const [scheme, ...alternatives] = route.security
    if (scheme === undefined) return undefined
    const authenticate = schemes[scheme]
    if (authenticate === undefined || alternatives.length > 0) {
      throw new Error(`${route.operationId}: no hook enforces the security scheme(s) ${route.security.join(', ')} of the contract`)
    }
    return { onRequest: [authenticate] }
  }
}

/** The `opsToken` scheme of ops/openapi.yaml: the bearer token must be OPS_TOKEN, when it is set. */
export function opsToken (token: string | undefined): onRequestHookHandler {
  const expected = Buffer.from(token ?? '')
  return (request, _reply, done) => {
    if (token === undefined) return done()
    const presented = bearerToken(request.headers.authorization ?? '')
    if (presented === undefined) return done(unauthorized('AUTHENTICATION_REQUIRED', 'The operations token is required.'))
    const given = Buffer.from(presented)
    done(given.length === expected.length && timingSafeEqual(given, expected) ? undefined : unauthorized('INVALID_TOKEN', 'The operations token is wrong.'))
  }
}

type VerifiedClaims = AccessTokenClaims & { readonly exp: number, readonly iat: number }

// How far another clock (an instance of the service) may run ahead when a token says when it was issued.
const CLOCK_TOLERANCE_SECONDS = 30

const tokenRequired = (): ApiError => unauthorized('AUTHENTICATION_REQUIRED', 'An access token is required.')
const invalidToken = (): ApiError => unauthorized('INVALID_TOKEN', 'The access token is invalid.')
const tokenExpired = (): ApiError => unauthorized('TOKEN_EXPIRED', 'The access token has expired.')

function accessToken (header: string): string {
  const token = bearerToken(header)
  if (token === undefined) throw tokenRequired()
  if (token === '') throw unauthorized('INVALID_TOKEN', 'The access token is malformed.')
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

interface BearerAuthOptions {
  /** @fastify/jwt's signer, set up with the service's secret, algorithm, issuer and audience. */
  readonly jwt: Pick<JWT, 'sign'>
  /** The payload of a token whose signature (by any secret that verifies), issuer and audience have passed. */
  readonly verifyAccessToken: (token: string) => Record<string, unknown>
  readonly metrics: Metrics
  readonly accessTokenTtlSeconds: number
}

/**
 * The `bearerAuth` scheme of openapi.yaml: rejects the request with 401 unless it carries a valid access token of a
 * live session, and sets `request.user` to the caller it speaks for.
 */
export function bearerAuth ({ jwt, verifyAccessToken, metrics, accessTokenTtlSeconds }: BearerAuthOptions): onRequestHookHandler {
  // Revocation is still checked on every request, against the session: the cache only skips the signature. Every
  // token this service signs has the same length (uuids, and times of ten digits until 2286); a longer one was not
  // issued by it, and is refused before it is verified or kept.
  const maxTokenLength = jwt.sign({ sub: randomUuid(), sid: randomUuid(), jti: randomUuid(), typ: 'access' }).length
  const verifiedTokens = new VerifiedTokens<VerifiedClaims>({ maxBytes: VERIFIED_TOKEN_BYTES, maxTokenLength })
  metrics.gauge({
    name: 'items_service_verified_tokens',
    help: `Access tokens whose verification is kept (at most ${verifiedTokens.capacity}, of at most ${maxTokenLength} bytes each).`,
    collect () { this.set(verifiedTokens.size) }
  })
  // app.jwt.verify with no per-call options (under verifyAccessToken) reuses one prebuilt fast-jwt verifier;
  // request.jwtVerify() would rebuild its options and run a callback chain on every request.
  const verify = (token: string, header: string, connection: object, now: number): VerifiedClaims => {
    if (token.length > maxTokenLength) throw invalidToken()
    let claims: VerifiedClaims | undefined
    try {
      claims = accessClaims(verifyAccessToken(token))
    } catch (error) {
      if ((error as { code?: string }).code === 'FAST_JWT_EXPIRED') throw tokenExpired()
      throw invalidToken()
    }
    // fast-jwt checks exp and nbf only. A token issued in the future, or living longer than this service issues
    // them, was not issued by it, whatever its signature says (a leaked secret, or a misconfigured twin).
    if (claims === undefined || claims.iat > now / 1000 + CLOCK_TOLERANCE_SECONDS || claims.exp - claims.iat > accessTokenTtlSeconds) {
      throw invalidToken()
    }
    // fast-jwt reads this process's clock; the store's may be ahead of it (a sandbox's, moved on).
    if (claims.exp * 1000 < now) throw tokenExpired()
    verifiedTokens.remember(token, header, connection, claims)
    return claims
  }

  // The caller a token speaks for, while its session lives and is still its user's.
  const principalOf = (claims: VerifiedClaims, session: Session | undefined, user: User | undefined): Principal | undefined =>
    session?.userId === claims.sub && user !== undefined ? { id: user.id, role: user.role, sessionId: session.id } : undefined
  // What the store cannot tell at once: a session or user that this instance has not read yet (Redis), a session
  // that has ended.
  const askStore = async (store: ServingStore, claims: VerifiedClaims): Promise<Principal> => {
    const session = await store.sessions.get(claims.sid, store.now())
    const user = session?.userId === claims.sub ? await store.users.get(claims.sub) : undefined
    const principal = principalOf(claims, session, user)
    if (principal === undefined) throw sessionEnded()
    return principal
  }

  // The caller, when the store has their session and user at hand, or else the claims to ask the store about.
  // Throws the 401 of a missing, malformed, invalid or expired token. A token's times, as its session's, are by the
  // store's clock, which every instance shares (and a sandbox's store may have moved on).
  const identify = (request: FastifyRequest): Principal | VerifiedClaims => {
    const { authorization } = request.headers
    if (authorization === undefined) throw tokenRequired()
    const connection = request.raw.socket
    const { store } = request
    const now = store.now()
    let claims = verifiedTokens.byConnection(authorization, connection, now)
    if (claims === undefined) {
      const token = accessToken(authorization)
      claims = verifiedTokens.get(token, authorization, connection, now) ?? verify(token, authorization, connection, now)
    }
    return principalOf(claims, store.sessions.cached(claims.sid, now), store.users.cached(claims.sub)) ?? claims
  }

  // A hook with a callback rather than an async function, so that a request whose session and user the store has
  // at hand goes on without a promise (see `Store`); every refusal goes through `done`.
  return function authenticate (request, _reply, done) {
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
    askStore(request.store, identified).then((principal) => {
      request.user = principal
      done()
    }, done)
  }
}
