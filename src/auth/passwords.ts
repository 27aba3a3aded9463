import { availableParallelism } from 'node:os'
import { serviceUnavailable } from '../errors.js'
import { HashingProcess } from './hashing-process.js'

/** Whether the caller still wants the answer: false once its client has hung up. */
export type StillWanted = () => boolean

export interface Passwords {
  hash (password: string, stillWanted: StillWanted): Promise<string>
  /** True when `password` matches `hash`; with no hash (an unknown user) it takes as long and is false. */
  verify (hash: string | undefined, password: string, stillWanted: StillWanted): Promise<boolean>
}

export interface PasswordsOptions {
  /** Sign-ins and registrations that may wait for a hash; one more is refused with 503 at once. */
  maxWaiting: number
  /** Hashes at once; by default one per core beyond the event loop's, at least one. */
  concurrency?: number
}

// A client told to come back gets the next second: a queue of any allowed length drains in about that long.
const RETRY_AFTER_SECONDS = 1

/**
 * Runs at most `concurrency` tasks at once; at most `maxWaiting` others wait, in arrival order, and a task whose
 * caller no longer wants it when its turn comes is dropped without running.
 */
function limitConcurrency (concurrency: number, maxWaiting: number): <T>(task: () => Promise<T>, stillWanted: StillWanted) => Promise<T> {
  let active = 0
  const waiting: Array<() => void> = []
  const release = (): void => {
    // Hand the slot straight to the next waiter, so no newcomer can take it in between.
    const next = waiting.shift()
    if (next === undefined) active -= 1
    else next()
  }
  return async (task, stillWanted) => {
    if (active < concurrency) {
      active += 1
    } else {
      if (waiting.length >= maxWaiting) throw serviceUnavailable('Too many sign-ins are waiting; try again shortly.', RETRY_AFTER_SECONDS)
      await new Promise<void>((resolve) => waiting.push(resolve))
    }
    if (!stillWanted()) {
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

// One per service process, like libuv's thread pool: every app built in this process shares it.
const hashingProcess = new HashingProcess()

/**
 * Hashing runs in a low-priority process (see HashingProcess), and at most one hash runs per core beyond the
 * event loop's (at least one), so a storm of sign-ins queues rather than taking every core and all the memory
 * argon2 asks for (19 MiB a hash). The queue is bounded, and work for clients that hung up is never done.
 */
export function createPasswords ({ maxWaiting, concurrency = Math.max(1, availableParallelism() - 1) }: PasswordsOptions): Passwords {
  const limit = limitConcurrency(concurrency, maxWaiting)
  return {
    hash: async (password, stillWanted) => await limit(async () => await hashingProcess.hash(password), stillWanted),
    verify: async (hash, password, stillWanted) => await limit(async () => await hashingProcess.verify(hash, password), stillWanted)
  }
}
