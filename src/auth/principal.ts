import type { Role } from '../domain/index.js'

/** Who is calling: set by authentication on every protected route. The role is read from the store. */
export interface Principal {
  readonly id: string
  readonly role: Role
  readonly sessionId: string
}
