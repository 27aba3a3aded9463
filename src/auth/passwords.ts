import { availableParallelism } from 'node:os'
import { HashingProcess } from './hashing-process.js'

export interface Passwords {
  hash (password: string): Promise<string>
  /** True when `password` matches `hash`; with no hash (an unknown user) it takes as long and is false. */
  verify (hash: string | undefined, password: string): Promise<boolean>
}

/** Runs at most `concurrency` tasks at once; the others wait in arrival order. */
function limitConcurrency (concurrency: number): <T>(task: () => Promise<T>) => Promise<T> {
  let active = 0
  const waiting: Array<() => void> = []
  return async (task) => {
    if (active < concurrency) active += 1
    else await new Promise<void>((resolve) => waiting.push(resolve))
    try {
      return await task()
    } finally {
      // Hand the slot straight to the next waiter, so no newcomer can take it in between.
      const next = waiting.shift()
      if (next === undefined) active -= 1
      else next()
    }
  }
}

// One per service process, like libuv's thread pool: every app built in this process shares it.
const hashingProcess = new HashingProcess()

/**
 * Hashing runs in a low-priority process (see HashingProcess), and at most one hash runs per core beyond the
 * event loop's (at least one), so a storm of sign-ins queues rather than taking every core and all the memory
 * argon2 asks for (19 MiB a hash).
 */
export function createPasswords (concurrency = Math.max(1, availableParallelism() - 1)): Passwords {
  const limit = limitConcurrency(concurrency)
  return {
    hash: async (password) => await limit(async () => await hashingProcess.hash(password)),
    verify: async (hash, password) => await limit(async () => await hashingProcess.verify(hash, password))
  }
}
