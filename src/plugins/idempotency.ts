import { createHash, randomUUID } from 'node:crypto'
import type { FastifyInstance, FastifyReply, onErrorHookHandler, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import stringify from 'safe-stable-stringify'
import type { IdempotentOperationId, RouteOperationId } from '../../generated/routes.js'
import { idempotencyKeyInUse, idempotencyKeyReused } from '../errors.js'
import type { IdempotencyClaim, StoredItem } from '../store/store.js'
import type { StepFor } from './route-steps.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's claim on its Idempotency-Key, which the handler records with what it makes; null without one. */
    idempotencyClaim: IdempotencyClaim | null
  }
  interface FastifyInstance {
    /** The Idempotency-Key's claim and replay, a step of the operations that declare the header. */
    idempotency: StepFor
  }
}

/** Sends again, as it was sent, the response of the create recorded under a key. */
export type Replay = (reply: FastifyReply, item: StoredItem) => FastifyReply

interface IdempotencyPluginOptions {
  /** How each operation that takes an Idempotency-Key (the contract declares it) sends a replay. */
  replays: Readonly<Record<IdempotentOperationId, Replay>>
}

// A request that still holds its key this long after claiming it died with its instance: the key is free again.
const CLAIM_LEASE_MS = 60_000

// The same body, whatever the order of its fields, has the same digest.
const digestOf = (text: string): string => createHash('sha256').update(text).digest('base64url')

/**
 * The IETF draft's Idempotency-Key on the operations that declare it: the first request with a key claims it (after
 * authentication and validation, before any rate limit counts it) and the store records what it made with it; a
 * retry with the same key and body gets that response again, with `Idempotent-Replayed: true`, and runs nothing
 * else: no limit counts it, no handler runs, no event is emitted. The same key with another body is 422; while its
 * first request runs, 409. A request that fails frees its key, so a retry runs again.
 */
async function idempotencyPlugin (app: FastifyInstance, options: IdempotencyPluginOptions): Promise<void> {
  const keys = app.store.idempotencyKeys
  app.decorateRequest('idempotencyClaim', null)
  const claimKey = (replay: Replay): preHandlerHookHandler => (request, reply, done) => {
    const key = request.headers['idempotency-key']
    if (typeof key !== 'string') {
      done()
      return
    }
    const body = String(stringify(request.body))
    const claim = { userId: request.user.id, key, fingerprint: digestOf(body), token: randomUUID(), characters: key.length + body.length }
    keys.claim(claim, CLAIM_LEASE_MS).then((outcome) => {
      switch (outcome.status) {
        case 'claimed':
          request.idempotencyClaim = claim
          done()
          break
        case 'recorded':
          // Answered here: the hooks after this one, and the handler, do not run.
          replay(reply.header('idempotent-replayed', 'true'), outcome.item)
          break
        case 'running':
          done(idempotencyKeyInUse())
          break
        case 'mismatch':
          done(idempotencyKeyReused())
      }
    }, done)
  }
  // Awaited before the error is answered, so that a retry sent on the answer finds the key free.
  const releaseClaim: onErrorHookHandler = (request, _reply, _error, done) => {
    const claim = request.idempotencyClaim
    if (claim === null) {
      done()
      return
    }
    keys.release(claim).then(() => { done() }, (err: unknown) => {
      request.log.warn({ err }, 'freeing an idempotency key failed; it is free again when its claim\'s lease ends')
      done()
    })
  }
  const takesKey = (operationId: RouteOperationId): operationId is IdempotentOperationId => Object.hasOwn(options.replays, operationId)
  app.decorate('idempotency', ({ idempotent, operationId }) => idempotent && takesKey(operationId)
    ? { preHandler: [claimKey(options.replays[operationId])], onError: [releaseClaim] }
    : undefined)
}

export default fp(idempotencyPlugin, { name: 'idempotency', dependencies: ['store', 'auth'] })
