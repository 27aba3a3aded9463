// What the client gives a caller of each answer: the data, or one typed error, and the ETag and Idempotency-Key
// that came with it.
import type { components } from './generated/openapi.js'

type Schemas = components['schemas']
/**
 * The contract's error codes, kept open: a service of a later minor version may answer a code this client does not
 * know yet (docs/contract.md asks clients to tolerate one), and it still type-checks as a string.
 */
export type ErrorCode = Schemas['ErrorCode']
/** What registering or signing in answers, and what a refresh renews. */
export type Session = Schemas['AuthResponse']

export const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null

/**
 * An HTTP answer outside 2xx, whatever its body: the contract's `code` and `message` (and, for a 400, the fields at
 * fault) when the body is the contract's error; `code` undefined when it is not (a proxy's HTML 502).
 */
export class ItemsApiError extends Error {
  readonly status: number
  readonly code: ErrorCode | undefined
  readonly details: Schemas['ValidationErrorResponse']['details'] | undefined
  /** The create's `Idempotency-Key`: sent again with it (`headers`), a create whose outcome is unknown is made once. */
  readonly idempotencyKey: string | undefined
  /** When a 429 or 503 says to try again (its `Retry-After`, in seconds), one the client did not wait out. */
  readonly retryAfterSeconds: number | undefined

  constructor (status: number, body: unknown, response?: Response) {
    const contractError = isObject(body) && typeof body.code === 'string' && typeof body.message === 'string'
    const location = status >= 300 && status < 400 ? response?.headers.get('location') : undefined
    super(contractError
      ? String(body.message)
      : `The service answered ${status}${location === undefined || location === null ? '' : `, a redirect to ${location}, which this client does not follow`}.`)
    this.name = 'ItemsApiError'
    this.status = status
    this.code = contractError ? String(body.code) : undefined
    this.details = contractError && Array.isArray(body.details) ? body.details as Schemas['ValidationErrorResponse']['details'] : undefined
    this.idempotencyKey = response === undefined ? undefined : keysOf.get(response)
    const retryAfter = response?.headers.get('retry-after')
    this.retryAfterSeconds = retryAfter === undefined || retryAfter === null ? undefined : Number(retryAfter)
  }
}

/**
 * No answer came (the connection failed or was cut): the request may or may not have been done. The client has
 * already sent again what was safe to send again; `cause` is fetch's own error.
 */
export class ItemsNetworkError extends Error {
  /** The create's `Idempotency-Key`: sent again with it (`headers`), a create whose outcome is unknown is made once. */
  readonly idempotencyKey: string | undefined
  /** When a 429 or 503 says to try again (its `Retry-After`, in seconds), one the client did not wait out. */
  readonly retryAfterSeconds: number | undefined

  constructor (cause: unknown, idempotencyKey?: string) {
    super(`No answer from the service: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
    this.name = 'ItemsNetworkError'
    this.idempotencyKey = idempotencyKey
  }
}

// The Idempotency-Key each final answer of a create was sent with, for its error.
const keysOf = new WeakMap<Response, string>()

/** Remembers the Idempotency-Key `response` answered, for the error it may become. */
export const answeredUnder = (response: Response, idempotencyKey: string): void => { keysOf.set(response, idempotencyKey) }
// The ETag each resource the client gave came with.
const etags = new WeakMap<object, string>()

/** The ETag the service sent with `resource` (an item the client gave), for `ifMatch` and `ifNoneMatch`. */
export const etagOf = (resource: object): string | undefined => etags.get(resource)

const keepEtag = (data: unknown, response: Response): void => {
  const etag = response.headers.get('etag')
  if (etag !== null && isObject(data)) etags.set(data, etag)
}

// The caller's own copy that a 304 answered with (the response the client made of it in the 304's place).
const copies = new WeakMap<Response, object>()

/** Answers `response` (a 304 made into a 200 of `copy`) with the caller's copy itself, not one parsed again. */
export const answeredWithTheCopy = (response: Response, copy: object): void => { copies.set(response, copy) }

type Answer<Data> = Promise<{ data?: Data, error?: unknown, response: Response }>

/** The data of a successful answer; an ItemsApiError otherwise, a 304 included (see `okOrUnchanged`). */
export async function ok<Data> (pending: Answer<Data>): Promise<Data> {
  const { data, error, response } = await pending
  if (!response.ok) throw new ItemsApiError(response.status, error, response)
  const copy = copies.get(response)
  if (copy !== undefined) return copy as Data
  keepEtag(data, response)
  return data as Data
}

/**
 * For a conditional read (`If-None-Match`): the data of a 200, or undefined for a 304, when the copy the caller
 * holds is current; an ItemsApiError otherwise.
 */
export async function okOrUnchanged<Data> (pending: Answer<Data>): Promise<Data | undefined> {
  const { data, error, response } = await pending
  if (response.status === 304) return undefined
  if (!response.ok) throw new ItemsApiError(response.status, error, response)
  keepEtag(data, response)
  return data
}
