import argon2 from 'argon2'

// OWASP's minimum for argon2id: 19 MiB of memory, two passes, one lane.
const hashOptions = { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const

export interface Passwords {
  hash (password: string): Promise<string>
  /** True when `password` matches `hash`; with no hash (an unknown user) it takes as long and is false. */
  verify (hash: string | undefined, password: string): Promise<boolean>
}

/** argon2 runs on libuv's thread pool, so hashing never blocks the event loop. */
export function createPasswords (): Passwords {
  // Verify against a fixed dummy hash when the email is unknown, so the response time does not reveal
  // which emails are registered. It is made in the background so that it does not delay startup.
  const dummyHash = argon2.hash('not a password of anyone', hashOptions)
  return {
    hash: async (password) => await argon2.hash(password, hashOptions),
    async verify (hash, password) {
      const matches = await argon2.verify(hash ?? await dummyHash, password)
      return hash !== undefined && matches
    }
  }
}
