import { createHash, randomUUID } from 'node:crypto'
import type { FastifyBaseLogger, FastifyReply, onErrorHookHandler, preHandlerHookHandler } from 'fastify'
import stringify from 'safe-stable-stringify'
import type { RouteDefinition } from '../../generated/routes.js'
import type { Item } from '../domain/index.js'
import { ApiError, idempotencyKeyInUse, idempotencyKeyReused } from '../errors.js'
import type { HeldKey, IdempotencyClaim, IdempotencyKeyStore } from '../store/store.js'
import type { StepFor } from './step.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's claim on its Idempotency-Key, which the handler records with what it makes; null until made. */
    idempotencyClaim: IdempotencyClaim | null
  }
}

interface IdempotencyOptions {
  /** How each header field the contract may require of a created item's response is made, by its lower-cased name. */
  readonly fields: Readonly<Record<string, (item: Item) => string>>
}

type Replay = (reply: FastifyReply, item: Item) => FastifyReply

// A request that still holds its key this long after claiming it died with its instance: the key is free again.
const CLAIM_LEASE_MS = 60_000

// A claim whose release failed (the store out of reach, a failover under way) is freed again every RELEASE_RETRY_MS
// in the background until its lease ends: the retry its 503 or 504 asks for then finds the key free soon after the
// store is back, however long it was away. At most PENDING_RELEASES claims are waiting to be tried again: past that
// (an outage under a flood of keyed creates), a key is free again when its lease ends, as without the retries.
const RELEASE_RETRY_MS = 250
export const PENDING_RELEASES = 1024

// The same body, whatever the order of its fields, has the same digest.
const digestOf = (text: string): string => createHash('sha256').update(text).digest('base64url')

/**
 * The response a retry gets, made from what the contract says of the operation's success: its status, the header
 * fields it requires (each made from the recorded item) and its body (the item, by the status's response schema).
 * An operation whose required fields none of `fields` makes fails at start.
 */
function replayOf (route: RouteDefinition, fields: IdempotencyOptions['fields']): Replay {
  const status = route.statuses.find((code) => code.startsWith('2')) ?? 'none'
  const names = route.requiredHeaders[status] ?? []
  const unmade = names.filter((name) => !Object.hasOwn(fields, name))
  if (route.schema.response[status] === undefined || unmade.length > 0) {
    throw new Error(`${route.operationId}: a replay needs a success status with a body (${status}) whose required fields are each made from the item (none makes: ${unmade.join(', ')})`)
  }
  const statusCode = Number(status)
  return (reply, item) => {
    for (const name of names) reply.header(name, fields[name]!(item))
    return reply.code(statusCode).send(item)
  }
}

/** The step of the IETF draft's Idempotency-Key. */
export interface IdempotencySteps {
  /**
   * The replay of a create recorded under the request's key, or its refusal (409, 422), or else the key claimed,
   * in one step of the store, which counts the create against its write limit (never a replay or a refusal).
   */
  readonly claim: StepFor
  /** Ends the releases still to be tried (the app closes). */
  readonly stop: () => void
}

/**
 * The IETF draft's Idempotency-Key on the operations that declare it. A retry with the key and body of a recorded
 * create gets that response again, with `Idempotent-Replayed: true`, and runs nothing else: no limit counts it, no
 * handler runs, no event is emitted. The same key with another body is 422; while its first request runs, 409.
 * Otherwise the request claims the key, in the same step of the store that counts it against its write limit (so
 * that the create's own write counts nothing again, and a create over its limit claims nothing), and the store
 * records what it made with it; a request that fails frees its key, so a retry runs again.
 */
export function idempotency ({ fields }: IdempotencyOptions): IdempotencySteps {
  const answer = (replay: Replay, reply: FastifyReply, held: HeldKey, done: (error?: Error) => void): void => {
    switch (held.status) {
      case 'recorded':
        // Answered here: the hooks after this one, and the handler, do not run.
        replay(reply.header('idempotent-replayed', 'true'), held.item)
        break
      case 'running':
        done(idempotencyKeyInUse())
        break
      case 'mismatch':
        done(idempotencyKeyReused())
    }
  }
  const claimKey = (replay: Replay): preHandlerHookHandler => (request, reply, done) => {
    const key = request.headers['idempotency-key']
    if (typeof key !== 'string') {
      done()
      return
    }
    const claim = { userId: request.user.id, key, fingerprint: digestOf(String(stringify(request.body))), token: randomUUID() }
    const limit = request.writeLimit ?? undefined
    request.writeLimit = null
    request.store.idempotencyKeys.claim(claim, CLAIM_LEASE_MS, limit).then((outcome) => {
      if (outcome.status !== 'claimed') {
        answer(replay, reply, outcome, done)
        return
      }
      request.idempotencyClaim = claim
      done()
    }, (error: Error) => {
      // Refused by its limit, nothing was claimed. Otherwise the claim may have been made (an unknown outcome): freed
      // as a failed request's is, so that the retry the answer asks for is not refused while the claim's lease lasts.
      if (!(error instanceof ApiError && error.statusCode === 429)) request.idempotencyClaim = claim
      done(error)
    })
  }
  // Claims whose freeing failed and is to be tried again (at most PENDING_RELEASES), and the timers that will.
  const pending = new Set<IdempotencyClaim>()
  const retries = new Set<NodeJS.Timeout>()
  const release = async (keys: IdempotencyKeyStore, claim: IdempotencyClaim, log: FastifyBaseLogger, leaseEndsAt: number): Promise<void> => {
    await keys.release(claim).then(() => { pending.delete(claim) }, (err: unknown) => {
      const triedAgain = pending.has(claim)
      // Past its lease the key is free anyway; past the bound, it is left to its lease.
      if (performance.now() + RELEASE_RETRY_MS >= leaseEndsAt || (!triedAgain && pending.size >= PENDING_RELEASES)) {
        pending.delete(claim)
        if (!triedAgain) log.warn({ err }, 'freeing an idempotency key failed; it is free again when its claim\'s lease ends')
        return
      }
      if (!triedAgain) {
        pending.add(claim)
        log.warn({ err }, 'freeing an idempotency key failed; it is tried again until its claim\'s lease ends')
      }
      const retry = setTimeout(() => {
        retries.delete(retry)
        void release(keys, claim, log, leaseEndsAt)
      }, RELEASE_RETRY_MS)
      retries.add(retry)
    })
  }
  // The first try is awaited before the error is answered, so that a retry sent on the answer finds the key free.
  const releaseClaim: onErrorHookHandler = (request, _reply, _error, done) => {
    const claim = request.idempotencyClaim
    if (claim === null) {
      done()
      return
    }
    release(request.store.idempotencyKeys, claim, request.log, performance.now() + CLAIM_LEASE_MS).then(() => { done() }, done)
  }
  return {
    claim: (route) => route.idempotent ? { preHandler: [claimKey(replayOf(route, fields))], onError: [releaseClaim] } : undefined,
    stop: () => {
      for (const retry of retries) clearTimeout(retry)
      retries.clear()
      pending.clear()
    }
  }
}
