import fastifyJwt from '@fastify/jwt'
import { createVerifier } from 'fast-jwt'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { HashingProcess } from '../../auth/hashing-process.js'
import { createPasswords, type Passwords, type QueueObserver } from '../../auth/passwords.js'
import { PerKeyQueue } from '../../runtime/per-key-queue.js'
import type { Principal } from '../../auth/principal.js'
import { type AccessTokenClaims, Tokens } from '../../auth/tokens.js'
import type { AppConfig } from '../../config/config.js'

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: AccessTokenClaims
    user: Principal
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    passwords: Passwords
    /** Registrations of one email key, one at a time. */
    registrations: PerKeyQueue
    /** Issues, refreshes and revokes token pairs (the sessions they belong to are in the request's `store.sessions`). */
    tokens: Tokens
    /**
     * The payload of an access token signed with JWT_SECRET or one of JWT_VERIFY_SECRETS, its issuer, audience and
     * times checked; throws fast-jwt's error otherwise.
     */
    verifyAccessToken: (token: string) => Record<string, unknown>
  }
}

type AuthPluginOptions = Pick<AppConfig, 'jwt' | 'refreshTokenTtlSeconds' | 'refreshReuseLeewaySeconds' | 'maxSessionsPerUser' | 'sessionSweepIntervalMs' | 'passwordQueueLimit' | 'passwordHashCost'> & {
  /** See BuildAppOptions.hashingProcess. */
  hashingProcess?: HashingProcess
}

// Sessions forgotten per sweep at most, so a sweep never holds the event loop for long (about a millisecond).
const SESSIONS_PER_SWEEP = 10_000

/** The sign-in queue's metrics, and one warning when it fills (one line, however many it then refuses) and one line when it empties. */
function signInQueueObserver (app: FastifyInstance, maxWaiting: number): QueueObserver {
  const waiting = app.metrics.gauge({ name: 'items_service_signin_queue_waiting', help: 'Sign-ins and registrations waiting for a password hash.' })
  const refused = app.metrics.counter({ name: 'items_service_signin_refused_total', help: 'Sign-ins and registrations refused with 503: the queue was full.' })
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

const signatureFailed = (error: unknown): boolean => (error as { code?: string }).code === 'FAST_JWT_INVALID_SIGNATURE'

/**
 * What accounts need: @fastify/jwt with the service's secret, algorithm, issuer and audience (`app.jwt`), the
 * password hasher, the token pairs and the sweep of ended sessions. The check of each request's access token is
 * the pipeline's authentication step (src/pipeline/authentication.ts).
 */
async function authPlugin (app: FastifyInstance, options: AuthPluginOptions): Promise<void> {
  const { secret, verifySecrets, issuer, audience, accessTokenTtlSeconds } = options.jwt
  // Pinning the algorithm rejects `alg: none` and any other algorithm a forger puts in the header.
  const verify = {
    algorithms: ['HS256' as const],
    allowedIss: issuer,
    allowedAud: audience,
    requiredClaims: ['exp', 'iat', 'sub', 'sid', 'jti', 'typ']
  }
  await app.register(fastifyJwt, {
    secret,
    sign: { algorithm: 'HS256', iss: issuer, aud: audience, expiresIn: accessTokenTtlSeconds },
    verify
  })
  // A token of another secret is tried against them only once the signing secret's signature failed: a rotation
  // costs nothing to the tokens of the secret that signs.
  const otherVerifiers = verifySecrets.map((key) => createVerifier({ key, ...verify }))
  app.decorate('verifyAccessToken', (token: string): Record<string, unknown> => {
    try {
      return app.jwt.verify<Record<string, unknown>>(token)
    } catch (error) {
      if (!signatureFailed(error)) throw error
      for (const other of otherVerifiers) {
        try {
          return other(token)
        } catch (otherError) {
          if (!signatureFailed(otherError)) throw otherError
        }
      }
      throw error
    }
  })

  app.decorate('passwords', createPasswords({ maxWaiting: options.passwordQueueLimit, observer: signInQueueObserver(app, options.passwordQueueLimit), hashingProcess: options.hashingProcess, hashCost: options.passwordHashCost }))
  app.decorate('registrations', new PerKeyQueue())
  // onClose runs once the server has stopped and every request in flight has been answered.
  app.addHook('onClose', async () => { await app.passwords.close() })
  app.decorate('tokens', new Tokens({
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
}

export default fp(authPlugin, { name: 'auth', dependencies: ['store', 'metrics'] })
