// How a store's capacity is shared among accounts: requests and limits, as cgroup v2's memory.min and memory.max.
// Every account admitted is guaranteed its floor, which no other account can take; past it, up to its ceiling, it
// draws on the shared part (what the floors leave of the budget), first come. The store admits an account only
// while it can reserve its floor, so within its floor an account's writes are never refused for lack of room.
// Part of each floor is kept for the account's sessions and refresh tokens, which are never refused: a sign-in or a
// refresh that would pass that part ends the account's own oldest sessions instead.

export interface CapacityBounds {
  /** Bytes the store keeps at most for all accounts: the floors reserved, and the shared part. */
  readonly budgetBytes: number
  /** Bytes reserved for each account when it is admitted, its sessions' part included. */
  readonly floorBytes: number
  /** The part of each floor kept for the account's sessions: their bytes never pass it, nor draw on the rest. */
  readonly sessionsBytes: number
  /** Bytes one account may make the store keep at most beside its sessions. */
  readonly ceilingBytes: number
}

/** What a store has set aside and what is used, in bytes as the store holds them. */
export interface CapacityReading {
  readonly budgetBytes: number
  /** Everything accounts make the store keep, their sessions included. */
  readonly heldBytes: number
  /** The floors of the accounts admitted. */
  readonly floorsBytes: number
  /** Held past their floors, out of the shared part (`budgetBytes - floorsBytes`); sessions never are. */
  readonly sharedUsedBytes: number
  readonly accounts: number
}

/** No bound at all: a store built without bounds (embedding, the conformance suite) refuses nothing for size. */
export const UNBOUNDED: CapacityBounds = { budgetBytes: Infinity, floorBytes: 0, sessionsBytes: Infinity, ceilingBytes: Infinity }
