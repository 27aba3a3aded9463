import { availableParallelism } from 'node:os'
import { type ApiError, serviceUnavailable } from '../errors.js'
import type { PasswordHashCost } from './hash-cost.js'
import { HashingProcess } from './hashing-process.js'

/** Who asks for a hash: its client's address, and whether that client still wants the answer. */
export interface Requester {
  readonly address: string
  /** False once the client has hung up. */
  stillWanted: () => boolean
}

export interface Passwords {
  hash (password: string, requester: Requester): Promise<string>
  /** True when `password` matches `hash`; with no hash (an unknown user) it takes as long and is false. */
  verify (hash: string | undefined, password: string, requester: Requester): Promise<boolean>
  /** Ends the hashing process. */
  close (): Promise<void>
}

/** Told what the queue of sign-ins and registrations does, for the metrics and the logs. */
export interface QueueObserver {
  /** How many wait now; told at every change. */
  waiting: (count: number) => void
  /** One was refused: the queue was full. */
  refused: () => void
}

export interface PasswordsOptions {
  /** Sign-ins and registrations that may wait for a hash; one more is refused with 503 at once. */
  maxWaiting: number
  observer?: QueueObserver
  /** Hashes at once; by default one per core beyond the event loop's, at least one. */
  concurrency?: number
  /** The process that hashes; by default one of their own at `hashCost`, ended by `close`. One given is left to its giver to end. */
  hashingProcess?: HashingProcess
  hashCost?: PasswordHashCost
}

// A client told to come back gets the next second: a queue of any allowed length drains in about that long.
const RETRY_AFTER_SECONDS = 1

const queueFull = (): ApiError => serviceUnavailable('Too many sign-ins are waiting; try again shortly.', RETRY_AFTER_SECONDS)

interface Waiter {
  admit: () => void
  refuse: (error: ApiError) => void
}

/**
 * Runs at most `concurrency` tasks at once; at most `maxWaiting` others wait, from any address while there is
 * room. A full queue refuses from the address that holds the most places: the newcomer when that is its own (or it
 * would be after joining), otherwise the biggest holder's newest waiter, whose place the newcomer takes. So a burst
 * from one address is served whole while nobody else waits, and a flood from one address never keeps another out.
 * Addresses take turns: a freed slot goes to the oldest task of the address that has waited longest for its turn,
 * which then goes to the back of the line. A task whose caller no longer wants it when its turn comes is dropped
 * unrun.
 */
function limitConcurrency (concurrency: number, maxWaiting: number, observer: QueueObserver | undefined): <T>(task: () => Promise<T>, requester: Requester) => Promise<T> {
  let active = 0
  let waitingCount = 0
  const waitingChanged = (change: number): void => {
    waitingCount += change
    observer?.waiting(waitingCount)
  }
  const refuse = (): ApiError => {
    observer?.refused()
    return queueFull()
  }
  // Waiting tasks by address, the addresses in turn order; an address leaves the map when it has none left.
  const waiting = new Map<string, Waiter[]>()
  const release = (): void => {
    // Hand the slot straight to the next waiter, so no newcomer can take it in between.
    const turn = waiting.entries().next()
    if (turn.done === true) {
      active -= 1
      return
    }
    const [address, waiters] = turn.value
    waiting.delete(address)
    // Every address in the map has a task waiting.
    const next = waiters.shift()!
    if (waiters.length > 0) waiting.set(address, waiters)
    waitingChanged(-1)
    next.admit()
  }
  // Makes room for a newcomer from `address` in a full queue, or refuses it. Scans the addresses (at most
  // `maxWaiting`) only while the queue is full.
  const makeRoom = (address: string): void => {
    let biggest: Waiter[] = []
    for (const waiters of waiting.values()) {
      if (waiters.length > biggest.length) biggest = waiters
    }
    const own = waiting.get(address)?.length ?? 0
    if (own + 1 >= biggest.length) throw refuse()
    // The biggest holder holds at least two places more than the newcomer's address, so it keeps one.
    biggest.pop()!.refuse(refuse())
    waitingChanged(-1)
  }
  return async (task, requester) => {
    if (active < concurrency) {
      active += 1
    } else {
      if (waitingCount >= maxWaiting) makeRoom(requester.address)
      waitingChanged(1)
      await new Promise<void>((resolve, reject) => {
        const waiters = waiting.get(requester.address) ?? []
        waiters.push({ admit: resolve, refuse: reject })
        waiting.set(requester.address, waiters)
      })
    }
    if (!requester.stillWanted()) {
      release()
      throw serviceUnavailable('The client has gone.', RETRY_AFTER_SECONDS)
    }
    try {
      return await task()
    } finally {
      release()
    }
  }
}

/**
 * Hashing runs in a low-priority process (see HashingProcess), and at most one hash runs per core beyond the
 * event loop's (at least one), so a storm of sign-ins queues rather than taking every core and all the memory
 * argon2 asks for (PASSWORD_HASH_MEMORY_KIB a hash). The queue is bounded, client addresses take turns in it, a full one refuses
 * from the biggest holder, and work for clients that hung up is never done.
 */
export function createPasswords ({ maxWaiting, observer, concurrency = Math.max(1, availableParallelism() - 1), hashingProcess, hashCost }: PasswordsOptions): Passwords {
  const limit = limitConcurrency(concurrency, maxWaiting, observer)
  const hashing = hashingProcess ?? new HashingProcess(hashCost)
  return {
    hash: async (password, requester) => await limit(async () => await hashing.hash(password), requester),
    verify: async (hash, password, requester) => await limit(async () => await hashing.verify(hash, password), requester),
    close: async () => { if (hashingProcess === undefined) await hashing.close() }
  }
}
