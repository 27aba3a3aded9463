import type { components } from '../generated/openapi.js'
import type { RateLimitName } from '../generated/routes.js'
import type { schemas } from '../generated/schemas.js'

/**
 * The codes this service sends: the contract's list, closed (the contract's type is open to the codes a later
 * version may add, for its clients; the service itself sends only those it names).
 */
export type ErrorCode = typeof schemas.ErrorCode.enum[number]
export type ErrorBody = components['schemas']['ErrorResponse']
export type ValidationErrorBody = components['schemas']['ValidationErrorResponse']

/** A server of the service's could not listen: the message names which, and where. */
export class ListenError extends Error {
  override name = 'ListenError'
}

/** An error whose status, code and message are meant for the client; the error handler sends it as it is. */
export class ApiError extends Error {
  constructor (
    readonly statusCode: number,
    readonly code: ErrorCode,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {}
  ) {
    super(message)
    this.name = 'ApiError'
  }
}

/** A request the contract's schemas let through but that is invalid all the same: a 400 with its details. */
export class InvalidRequestError extends Error {
  constructor (readonly details: ValidationErrorBody['details']) {
    super('The request is invalid.')
    this.name = 'InvalidRequestError'
  }
}

// RFC 6750 §3: every 401 from a protected resource names the scheme; a presented but bad token adds the error.
export function unauthorized (code: 'AUTHENTICATION_REQUIRED' | 'TOKEN_EXPIRED' | 'INVALID_TOKEN', message: string): ApiError {
  const challenge = code === 'AUTHENTICATION_REQUIRED'
    ? 'Bearer realm="items"'
    : `Bearer realm="items", error="invalid_token", error_description="${message}"`
  return new ApiError(401, code, message, { 'www-authenticate': challenge })
}

export const invalidCredentials = (): ApiError =>
  new ApiError(401, 'INVALID_CREDENTIALS', 'The email or password is incorrect.')

export const invalidRefreshToken = (): ApiError =>
  new ApiError(401, 'INVALID_REFRESH_TOKEN', 'The refresh token is invalid.')

/** A request of an account removed after its token was checked: its session ended with the account. */
export const sessionEnded = (): ApiError => unauthorized('INVALID_TOKEN', 'The session of this access token has ended.')

export const forbidden = (message: string): ApiError => new ApiError(403, 'FORBIDDEN', message)

export const itemQuotaExceeded = (): ApiError =>
  new ApiError(403, 'ITEM_QUOTA_EXCEEDED', 'You already own as many items as the service allows; delete one first.')

export const notFound = (what: string): ApiError => new ApiError(404, 'NOT_FOUND', `${what} not found.`)

export const sandboxesOff = (): ApiError => new ApiError(404, 'NOT_FOUND', 'Sandboxes are off on this instance (SANDBOXES=on turns them on).')

export const sandboxLimitReached = (limit: number): ApiError => new ApiError(507, 'STORE_FULL',
  `All ${limit} sandboxes that SANDBOX_LIMIT allows exist; delete one (or wait for one to idle out after SANDBOX_IDLE_SECONDS), or raise SANDBOX_LIMIT.`)

/** A wait on a sandbox's journal past what one instance holds: on that sandbox, or in all. */
export const journalWaitsRefused = (bound: 'per key' | 'in all'): ApiError => new ApiError(429, 'RATE_LIMITED',
  `This instance holds as many waits ${bound === 'per key' ? 'on this sandbox\'s journal' : 'on sandboxes\' journals'} as it allows; try again when one ends.`, { 'retry-after': '1' })

export const preconditionFailed = (): ApiError =>
  new ApiError(412, 'PRECONDITION_FAILED', 'The item has changed since you read it; read it again and retry.')

/** The only body a 500 ever has: nothing about what failed leaves the service. */
export const INTERNAL_ERROR_BODY: ErrorBody = { code: 'INTERNAL_ERROR', message: 'An unexpected error occurred.' }

/** A registration past the accounts the store admits (MAX_ACCOUNTS; a sandbox's SANDBOX_ACCOUNTS). */
export const storeFull = (accounts: number): ApiError => new ApiError(507, 'STORE_FULL', `The service holds the ${accounts} accounts it admits; no more can register.`)

/** A write past its account's quota (ACCOUNT_QUOTA_KIB), its own oldest idempotency records forgotten already. */
export const accountQuotaExceeded = (quotaBytes: number): ApiError => new ApiError(403, 'ACCOUNT_QUOTA_EXCEEDED',
  `This would take your account past the ${quotaBytes} bytes of items the service keeps for each; delete or shorten some items first.`)

export const serviceUnavailable = (message: string, retryAfterSeconds?: number): ApiError =>
  new ApiError(503, 'SERVICE_UNAVAILABLE', message, retryAfterSeconds === undefined ? {} : { 'retry-after': String(retryAfterSeconds) })

export const outcomeUnknown = (): ApiError =>
  new ApiError(504, 'OUTCOME_UNKNOWN', 'The change may or may not have been made: the data store\'s answer was lost. Retry it with the same Idempotency-Key, or read before you retry.')

// What each limit the contract names counts, as a refusal says it.
const LIMITED: Readonly<Record<RateLimitName, string>> = {
  register: 'Too many registrations from this address',
  registrations: 'Too many registrations to the service',
  'login-address': 'Too many sign-ins from this address',
  login: 'Too many sign-ins to this account from this address',
  'login-failures': 'Too many failed sign-ins to this account',
  refresh: 'Too many token refreshes from this address',
  'item-writes': 'Too many item writes (creates, edits and deletes together)'
}

export const rateLimited = (limit: RateLimitName, retryAfterSeconds: number): ApiError =>
  new ApiError(429, 'RATE_LIMITED', `${LIMITED[limit]}; try again later.`, { 'retry-after': String(retryAfterSeconds) })

export const idempotencyKeyInUse = (): ApiError =>
  new ApiError(409, 'IDEMPOTENCY_KEY_IN_USE', 'A request with this Idempotency-Key is still running; retry after a moment.')

export const idempotencyKeyReused = (): ApiError =>
  new ApiError(422, 'IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was used with another request body; use a new key.')

export const emailAlreadyRegistered = (): ApiError =>
  new ApiError(409, 'EMAIL_ALREADY_REGISTERED', 'This email is already registered.')
