// The password hashing process that hashing-process.ts starts, at a lower CPU priority than the service.
import argon2 from 'argon2'
import type { PasswordHashCost } from './hash-cost.js'
import type { HashingRequest, HashingResponse } from './hashing-process.js'

// The cost, as HashingProcess passes it (JSON, the only argument).
const cost = JSON.parse(String(process.argv[2])) as PasswordHashCost
const hashOptions = { type: argon2.argon2id, memoryCost: cost.memoryKib, timeCost: cost.passes, parallelism: 1 } as const
// An unknown user's password is checked against this, so the answer takes as long as for a known user.
const dummyHash = argon2.hash('not a password of anyone', hashOptions)

async function answer (request: HashingRequest): Promise<HashingResponse> {
  try {
    if (request.operation === 'hash') return { id: request.id, value: await argon2.hash(request.password, hashOptions) }
    const matches = await argon2.verify(request.hash ?? await dummyHash, request.password)
    return { id: request.id, value: request.hash !== undefined && matches }
  } catch (error) {
    return { id: request.id, error: String(error) }
  }
}

process.on('message', (request: HashingRequest) => {
  // The service may have gone while this hash ran: then the answer has no one to reach, and sending it would fail.
  void answer(request).then((response) => { if (process.connected) process.send?.(response) })
})
// The service has exited, or crashed: there is no one left to hash for.
process.on('disconnect', () => { process.exit(0) })
