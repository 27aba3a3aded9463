import { createHash } from 'node:crypto'
import type { preHandlerHookHandler } from 'fastify'
import stringify from 'safe-stable-stringify'
import type { IdempotencyKey } from '../store/store.js'
import type { StepFor } from './step.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's Idempotency-Key, which the handler's write records with what it makes; null without one. */
    idempotencyKey: IdempotencyKey | null
  }
}

// The same body, whatever the order of its fields, has the same digest.
const digestOf = (text: string): string => createHash('sha256').update(text).digest('base64url')

const keyOf: preHandlerHookHandler = (request, _reply, done) => {
  const key = request.headers['idempotency-key']
  if (typeof key === 'string') request.idempotencyKey = { userId: request.user.id, key, fingerprint: digestOf(String(stringify(request.body))) }
  done()
}

/**
 * The IETF draft's Idempotency-Key on the operations that declare it: the caller's key and a digest of the request,
 * which the store records with the create in the one atomic step that makes it, or finds recorded there instead. A
 * retry with the key and body of a recorded create gets that create's item again (the handler marks it
 * `Idempotent-Replayed: true`), and nothing else happens: no limit counts it, no event is emitted. The same key with
 * another body is 422. Requests sent at once with one key make one item: the first to reach the store makes it, the
 * others are answered with it. A create that fails records nothing, so its retry runs again.
 */
export const idempotency: StepFor = (route) => route.idempotent ? { preHandler: [keyOf] } : undefined
