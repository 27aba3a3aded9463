import type { ItemRefusal } from '../domain/items.js'
import type { Item } from '../domain/index.js'

// What a store rejects with, whichever it is.

/** The claim passed to `ItemStore.add` no longer held its key (its lease ended, and another request took it): nothing was added. */
export class ClaimLostError extends Error {
  override name = 'ClaimLostError'
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
export function itemRefused (refusal: ItemRefusal, item: Item, claimKey?: string): undefined {
  if (refusal === 'owns most') return undefined
  if (refusal === 'claim lost') throw new ClaimLostError(`idempotency key ${String(claimKey)} is held by another request`)
  if (refusal === 'id taken') throw new IdTakenError(`item ${item.id} exists already`)
  throw new UserRemovedError(`contributor ${item.contributorId} has no account`)
}
