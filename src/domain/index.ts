import type { components } from '../../generated/openapi.js'

// What the service is about, whoever keeps it: the contract's items and roles, and what it keeps of a user and a
// session. The stores (src/store/) keep them; the handlers and the pipeline read them.

export type Role = components['schemas']['Role']
export type Item = Readonly<components['schemas']['Item']>

export interface User {
  readonly id: string
  /** As the user typed it. */
  readonly email: string
  /** The identity key that makes emails unique: trimmed, NFC-normalised, lower-cased. */
  readonly emailKey: string
  readonly passwordHash: string
  readonly firstName: string
  readonly lastName: string
  readonly role: Role
  readonly createdAt: string
}

export interface Session {
  readonly id: string
  readonly userId: string
  /** Milliseconds since the epoch; the session's absolute end. */
  readonly expiresAt: number
}

export type ItemStatus = Item['status']
