import { availableParallelism } from 'node:os'
import { type ApiError, serviceUnavailable } from '../errors.js'
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

export interface PasswordsOptions {
  /** Sign-ins and registrations that may wait for a hash; one more is refused with 503 at once. */
  maxWaiting: number
  /** Hashes at once; by default one per core beyond the event loop's, at least one. */
  concurrency?: number
}

// A client told to come back gets the next second: a queue of any allowed length drains in about that long.
const RETRY_AFTER_SECONDS = 1
// The share of the queue one client address may hold: a flood from one address leaves room for others.
const SHARE_PER_ADDRESS = 1 / 4

const queueFull = (): ApiError => serviceUnavailable('Too many sign-ins are waiting; try again shortly.', RETRY_AFTER_SECONDS)

/**
 * Runs at most `concurrency` tasks at once. At most `maxWaiting` others wait, and at most a quarter of those come
 * from one client address. Addresses take turns: a freed slot goes to the oldest task of the address that has
 * waited longest for its turn, which then goes to the back of the line, so a flood from one address delays the
 * others by about one task each. A task whose caller no longer wants it when its turn comes is dropped unrun.
 */
function limitConcurrency (concurrency: number, maxWaiting: number): <T>(task: () => Promise<T>, requester: Requester) => Promise<T> {
  const maxWaitingPerAddress = Math.max(1, Math.floor(maxWaiting * SHARE_PER_ADDRESS))
  let active = 0
  let waitingCount = 0
  // Waiting tasks by address, the addresses in turn order; an address leaves the map when it has none left.
  const waiting = new Map<string, Array<() => void>>()
  const release = (): void => {
    // Hand the slot straight to the next waiter, so no newcomer can take it in between.
    for (const [address, tasks] of waiting) {
      waiting.delete(address)
      // Every address in the map has a task waiting.
      const next = tasks.shift()!
      if (tasks.length > 0) waiting.set(address, tasks)
      waitingCount -= 1
      next()
      return
    }
    active -= 1
  }
  return async (task, requester) => {
    if (active < concurrency) {
      active += 1
    } else {
      const tasks = waiting.get(requester.address) ?? []
      if (waitingCount >= maxWaiting || tasks.length >= maxWaitingPerAddress) throw queueFull()
      waitingCount += 1
      await new Promise<void>((resolve) => {
        tasks.push(resolve)
        waiting.set(requester.address, tasks)
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
 * argon2 asks for (19 MiB a hash). The queue is bounded, client addresses take turns in it, and work for clients
 * that hung up is never done.
 */
export function createPasswords ({ maxWaiting, concurrency = Math.max(1, availableParallelism() - 1) }: PasswordsOptions): Passwords {
  const limit = limitConcurrency(concurrency, maxWaiting)
  const hashingProcess = new HashingProcess()
  return {
    hash: async (password, requester) => await limit(async () => await hashingProcess.hash(password), requester),
    verify: async (hash, password, requester) => await limit(async () => await hashingProcess.verify(hash, password), requester),
    close: async () => { await hashingProcess.close() }
  }
}
