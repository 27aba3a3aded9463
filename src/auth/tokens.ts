import { createHash, randomBytes } from 'node:crypto'
import type { ServingStore } from '../store/store.js'
import { randomUuid } from '../runtime/uuid.js'

/** The claims this service puts in an access token besides iat, exp, iss and aud. */
export interface AccessTokenClaims {
  sub: string
  sid: string
  jti: string
  typ: 'access'
}

export interface TokenPair {
  accessToken: string
  refreshToken: string
  expiresIn: number
}

export interface TokensOptions {
  /** Signs the claims, with `exp` counted from the `iat` given. */
  signAccessToken: (claims: AccessTokenClaims & { iat: number }) => string
  accessTokenTtlSeconds: number
  refreshTokenTtlSeconds: number
  /** How long a just-replaced refresh token is still accepted (a retry, a second tab); 0 for never. */
  refreshReuseLeewaySeconds: number
  maxSessionsPerUser: number
}

// Refresh tokens are 256 random bits; only their SHA-256 is stored, so a leaked store holds no usable token.
const hashRefreshToken = (token: string): string => createHash('sha256').update(token).digest('base64url')
const newRefreshToken = (): string => randomBytes(32).toString('base64url')

/** Opens, refreshes and closes sessions in the store given: one per sign-in, each with a single-use refresh token. */
export class Tokens {
  readonly #options: TokensOptions

  constructor (options: TokensOptions) {
    this.#options = options
  }

  async open (store: ServingStore, userId: string): Promise<TokenPair> {
    const sessionId = randomUuid()
    const refreshToken = newRefreshToken()
    await store.sessions.open(
      { id: sessionId, userId, expiresAt: store.now() + this.#options.refreshTokenTtlSeconds * 1000 },
      hashRefreshToken(refreshToken),
      this.#options.maxSessionsPerUser
    )
    return this.#pair(store, userId, sessionId, refreshToken)
  }

  /** A new pair for a valid refresh token; undefined for any other token (a reused one also ends its session). */
  async refresh (store: ServingStore, refreshToken: string): Promise<{ userId: string, tokens: TokenPair } | undefined> {
    const nextRefreshToken = newRefreshToken()
    const outcome = await store.sessions.rotateRefreshToken(
      hashRefreshToken(refreshToken), hashRefreshToken(nextRefreshToken), store.now(), this.#options.refreshReuseLeewaySeconds * 1000)
    if (outcome.status !== 'rotated') return undefined
    const { userId, id } = outcome.session
    return { userId, tokens: this.#pair(store, userId, id, nextRefreshToken) }
  }

  async close (store: ServingStore, sessionId: string): Promise<void> {
    await store.sessions.revoke(sessionId)
  }

  // An access token's times are by the store's clock, as its session's are: a sandbox's own, when one has moved it.
  #pair (store: ServingStore, userId: string, sessionId: string, refreshToken: string): TokenPair {
    const iat = Math.floor(store.now() / 1000)
    return {
      accessToken: this.#options.signAccessToken({ sub: userId, sid: sessionId, jti: randomUuid(), typ: 'access', iat }),
      refreshToken,
      expiresIn: this.#options.accessTokenTtlSeconds
    }
  }
}
