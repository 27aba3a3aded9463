// How a store's capacity is shared among accounts: requests and limits, as cgroup v2's memory.min and memory.max.
// Every account admitted is guaranteed its floor, which no other account can take; past it, up to its ceiling, it
// draws on the shared part (what the floors leave of the budget), first come. The store admits an account only
// while it can reserve its floor, so within its floor an account's writes are never refused for lack of room.

export interface CapacityBounds {
  /** Bytes the store keeps at most for all accounts: the floors reserved, and the shared part. */
  readonly budgetBytes: number
  /** Bytes reserved for each account when it is admitted. */
  readonly floorBytes: number
  /** Bytes one account may make the store keep at most. */
  readonly ceilingBytes: number
}

/** What a store has set aside and what is used, in bytes as the store holds them. */
export interface CapacityReading {
  readonly budgetBytes: number
  /** Everything accounts make the store keep. */
  readonly heldBytes: number
  /** The floors of the accounts admitted. */
  readonly floorsBytes: number
  /** Held past their floors, out of the shared part (`budgetBytes - floorsBytes`). */
  readonly sharedUsedBytes: number
  readonly accounts: number
}

/** No bound at all: a store built without bounds (embedding, the conformance suite) refuses nothing for size. */
export const UNBOUNDED: CapacityBounds = { budgetBytes: Infinity, floorBytes: 0, ceilingBytes: Infinity }
