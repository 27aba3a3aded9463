import { availableParallelism } from 'node:os'
import argon2 from 'argon2'

// OWASP's minimum for argon2id: 19 MiB of memory, two passes, one lane.
const hashOptions = { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const

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

/**
 * argon2 runs on libuv's thread pool, so hashing never blocks the event loop; but a storm of sign-ins would keep
 * every core busy with it and starve the event loop of CPU. So at most one hash runs per core beyond the event
 * loop's (at least one), and further sign-ins queue.
 */
export function createPasswords (concurrency = Math.max(1, availableParallelism() - 1)): Passwords {
  const limit = limitConcurrency(concurrency)
  // Verify against a fixed dummy hash when the email is unknown, so the response time does not reveal
  // which emails are registered. It is made in the background so that it does not delay startup.
  const dummyHash = limit(async () => await argon2.hash('not a password of anyone', hashOptions))
  return {
    hash: async (password) => await limit(async () => await argon2.hash(password, hashOptions)),
    async verify (hash, password) {
      const reference = hash ?? await dummyHash
      const matches = await limit(async () => await argon2.verify(reference, password))
      return hash !== undefined && matches
    }
  }
}
