import type { RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyRequest } from 'fastify'
import { emailKey } from './auth/email.js'
import type { AppConfig, RateLimit } from './config.js'
import type { OperationId } from './handlers/handler.js'

const limit = ({ max, windowSeconds }: RateLimit): RateLimitOptions => ({ max, timeWindow: windowSeconds * 1000 })

// Login attempts count per client address and email: guessing one account's password is slowed down, while a
// test rig signing in many accounts from one machine is not.
const loginKey = (request: FastifyRequest): string => {
  const { email } = request.body as { email: string }
  return `${request.ip}\n${emailKey(email)}`
}

/** The brute-force limits of the public auth operations; none when RATE_LIMIT=off. */
export function rateLimitsFor (config: AppConfig): Partial<Record<OperationId, RateLimitOptions>> {
  if (config.rateLimits === null) return {}
  const { login, register, refresh } = config.rateLimits
  return {
    // After validation, so the key can use the email.
    loginUser: { ...limit(login), hook: 'preHandler', keyGenerator: loginKey },
    registerUser: limit(register),
    refreshTokens: limit(refresh)
  }
}
