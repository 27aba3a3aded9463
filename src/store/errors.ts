import { type CreateRecord, type NamedItemRefusal, replayOf } from '../domain/items.js'
import type { Item } from '../domain/index.js'
import type { StoredItem } from '../domain/serialized.js'

// What a store rejects with, whichever it is.

/** A create sent with an Idempotency-Key its caller recorded another request under: nothing was added. */
export class KeyReusedError extends Error {
  override name = 'KeyReusedError'
}

/**
 * A create sent with an Idempotency-Key that a request still running holds, which an instance of a release before
 * 1.2.0 claimed (during a rolling upgrade): nothing was added, and its retry gets that request's answer.
 */
export class KeyInUseError extends Error {
  override name = 'KeyInUseError'
}

/** A user or an item whose id another already has: the store never overwrites one (ids are made here; a SEED_FILE gives some). */
export class IdTakenError extends Error {
  override name = 'IdTakenError'
}

/** A registration refused: the store holds as many accounts as it admits (AccountBounds.accounts). Nothing was changed. */
export class StoreFullError extends Error {
  override name = 'StoreFullError'

  constructor (readonly accounts: number) {
    super(`the store holds the ${accounts} accounts it admits`)
  }
}

/** A write that would take its account past its quota (AccountBounds.quotaBytes). Nothing was changed. */
export class QuotaExceededError extends Error {
  override name = 'QuotaExceededError'

  constructor (readonly quotaBytes: number) {
    super(`the account would keep more than its quota of ${quotaBytes} bytes`)
  }
}

/**
 * A session opened, or an item written, for a user whose account has been removed: nothing was changed. Checked in
 * the step that would store it, so that a request authenticated before a removal writes nothing after it.
 */
export class UserRemovedError extends Error {
  override name = 'UserRemovedError'
}

/** The store cannot be reached or did not answer in time, and nothing was changed; the request may be retried. */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError'
}

/** Redis refused a write at its maxmemory: nothing was changed, and nothing will be until it has room. */
export class StoreOutOfMemoryError extends StoreUnavailableError {
  override name = 'StoreOutOfMemoryError'
}

/**
 * A write was sent, its reply was lost, and the store could not be asked in time whether it was made: it may have
 * been. Never a StoreUnavailableError, which says that nothing was changed.
 */
export class OutcomeUnknownError extends Error {
  override name = 'OutcomeUnknownError'
}

/**
 * What a store answers for an item's write that `refusal` refused (src/domain/items.ts): undefined when its contributor
 * owns as many items as each may; otherwise it throws the refusal's error. Nothing was changed.
 */
export function itemRefused (refusal: NamedItemRefusal, item: Item): undefined {
  if (refusal === 'owns most') return undefined
  if (refusal === 'id taken') throw new IdTakenError(`item ${item.id} exists already`)
  throw new UserRemovedError(`contributor ${item.contributorId} has no account`)
}

/**
 * What `ItemStore.add` answers for a create whose Idempotency-Key names `record` ('key recorded'): the recorded item,
 * when the request is the same; else it throws a KeyReusedError. Nothing was changed.
 */
export function recordedCreate (record: CreateRecord, fingerprint: string): StoredItem {
  const item = replayOf(record, fingerprint)
  if (item === undefined) throw new KeyReusedError('the idempotency key was used with another request')
  return item
}
