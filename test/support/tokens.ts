import { createHmac } from 'node:crypto'
import { TEST_JWT_SECRET } from './app.js'

const encode = (value: object): string => Buffer.from(JSON.stringify(value)).toString('base64url')

/** Signs any header and claims with HMAC, so tests can forge the tokens an attacker would try. */
export function forgeToken (header: Record<string, unknown>, claims: Record<string, unknown>, secret = TEST_JWT_SECRET): string {
  const signingInput = `${encode(header)}.${encode(claims)}`
  const algorithm = header.alg === 'HS512' ? 'sha512' : 'sha256'
  return `${signingInput}.${createHmac(algorithm, secret).update(signingInput).digest('base64url')}`
}

export function decodeClaims (token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>
}
