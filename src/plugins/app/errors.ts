import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { accountQuotaExceeded, ApiError, type ErrorBody, type ErrorCode, idempotencyKeyInUse, idempotencyKeyReused, INTERNAL_ERROR_BODY, InvalidRequestError, outcomeUnknown, serviceUnavailable, sessionEnded, storeFull, type ValidationErrorBody } from '../../errors.js'
import { KeyInUseError, KeyReusedError, OutcomeUnknownError, QuotaExceededError, StoreFullError, StoreUnavailableError, UserRemovedError } from '../../store/store.js'

type ValidationIssue = NonNullable<FastifyError['validation']>[number]
type ValidationDetail = ValidationErrorBody['details'][number]

// Errors that Fastify and its plugins raise themselves, by status code, mapped onto the contract's codes.
const codeForStatus: Partial<Record<number, ErrorCode>> = {
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  416: 'RANGE_NOT_SATISFIABLE',
  429: 'RATE_LIMITED',
  503: 'SERVICE_UNAVAILABLE'
}

function issueText (issue: ValidationIssue): string {
  switch (issue.keyword) {
    case 'required': return 'is required'
    case 'additionalProperties': return 'is not an allowed field'
    case 'enum': return `must be one of: ${(issue.params.allowedValues as unknown[]).join(', ')}`
    case 'minProperties': return 'must contain at least one field'
    default: return String(issue.message)
  }
}

// `body.name` for a body field, `headers.idempotency-key` for a header, `pageSize` or `itemId` for a parameter,
// `body` for the body as a whole.
function fieldPath (issue: ValidationIssue, context: string): string {
  const segments = issue.instancePath.split('/').slice(1)
  const property = issue.params.missingProperty ?? issue.params.additionalProperty ?? issue.params.property
  if (typeof property === 'string') segments.push(property)
  return (context === 'body' || context === 'headers' ? [context, ...segments] : segments).join('.')
}

export function validationError (details: ValidationDetail[]): ValidationErrorBody {
  return { code: 'VALIDATION_ERROR', message: 'The request is invalid.', details }
}

const sendApiError = (reply: FastifyReply, error: ApiError): FastifyReply =>
  reply.code(error.statusCode).headers(error.headers).send({ code: error.code, message: error.message } satisfies ErrorBody)

// Redis is reconnected to at most this long after it is back (the store's reconnect backoff).
const STORE_RETRY_AFTER_SECONDS = 2

export function handleError (error: FastifyError | ApiError | InvalidRequestError | StoreUnavailableError | OutcomeUnknownError | StoreFullError | QuotaExceededError | KeyReusedError | KeyInUseError | UserRemovedError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error instanceof KeyReusedError) return sendApiError(reply, idempotencyKeyReused())
  if (error instanceof KeyInUseError) return sendApiError(reply, idempotencyKeyInUse())
  if (error instanceof StoreFullError) {
    request.log.warn({ err: error, accounts: error.accounts }, 'store full')
    return sendApiError(reply, storeFull(error.accounts))
  }
  if (error instanceof QuotaExceededError) return sendApiError(reply, accountQuotaExceeded(error.quotaBytes))
  // The account was removed while the request was on its way: its session ended with it.
  if (error instanceof UserRemovedError) return sendApiError(reply, sessionEnded())
  if (error instanceof OutcomeUnknownError) {
    request.log.warn({ err: error }, 'a write\'s reply from the store was lost and its outcome could not be learnt in time')
    return sendApiError(reply, outcomeUnknown())
  }
  if (error instanceof StoreUnavailableError) {
    // The outage itself is one warning of the store's (`Redis is unreachable`); each request it refuses, a line
    // without the stack at debug, beside Fastify's own line of its 503.
    request.log.debug({ reason: error.message }, 'store unavailable')
    return sendApiError(reply, serviceUnavailable('The data store is unavailable; try again shortly.', STORE_RETRY_AFTER_SECONDS))
  }
  if (error instanceof ApiError) return sendApiError(reply, error)
  if (error instanceof InvalidRequestError) return reply.code(400).send(validationError(error.details))
  if (error.validation) {
    const context = String(error.validationContext)
    // One detail a field, its first issue: text that is not a decimal number may break its bounds too, once read.
    const seen = new Set<string>()
    const details = error.validation.flatMap((issue) => {
      const field = fieldPath(issue, context)
      if (seen.has(field)) return []
      seen.add(field)
      return [{ field, issue: issueText(issue) }]
    })
    return reply.code(400).send(validationError(details))
  }
  const statusCode = error.statusCode ?? 500
  if (error.code === 'FST_ERR_BAD_URL') {
    return reply.code(400).send(validationError([{ field: 'url', issue: 'is not a valid URL' }]))
  }
  if (statusCode === 400) {
    // Malformed or prototype-poisoned JSON, an empty JSON body: the body as a whole is at fault.
    return reply.code(400).send(validationError([{ field: 'body', issue: error.message }]))
  }
  // Any other status a plugin gives an error it raises (a client's fault, 4xx) is kept.
  const code = codeForStatus[statusCode] ?? (statusCode >= 400 && statusCode < 500 ? 'BAD_REQUEST' : undefined)
  if (code !== undefined) {
    return reply.code(statusCode).send({ code, message: error.message } satisfies ErrorBody)
  }
  request.log.error({ err: error }, 'request failed')
  return reply.code(500).send(INTERNAL_ERROR_BODY)
}

// What a connection gets when Node's HTTP parser refuses its request, before Fastify sees any request at all.
const refusals: Record<string, { status: number, body: ErrorBody | ValidationErrorBody }> = {
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, body: { code: 'BAD_REQUEST', message: 'The request took too long to arrive.' } },
  HPE_HEADER_OVERFLOW: { status: 431, body: { code: 'BAD_REQUEST', message: 'The request headers are larger than the service accepts.' } }
}
const malformed = { status: 400, body: validationError([{ field: 'request', issue: 'is not valid HTTP' }]) }

/** Fastify's clientErrorHandler: Fastify's own, with bodies in the contract's shapes. */
export function handleClientError (error: Error & { code?: string }, socket: Socket): void {
  // A reset connection has nobody left to answer.
  if (error.code === 'ECONNRESET') return
  const { status, body } = refusals[String(error.code)] ?? malformed
  const json = JSON.stringify(body)
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(json)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${json}`)
  socket.destroySoon()
}

/**
 * The server options by which only what a contract declares leaves a server, on the API's port and the operations
 * port alike: Fastify's own errors in the contract's shapes, and no answer the contracts do not declare.
 */
export const contractedAnswers = {
  frameworkErrors: handleError,
  clientErrorHandler: handleClientError,
  // A path parameter of any length reaches validation, which answers the contract's 400 (Fastify would send an
  // undeclared 414 past 100 characters). Node's header limit bounds the whole URL anyway.
  routerOptions: { maxParamLength: 16_384 },
  // Only what the contract declares is served: no HEAD twin of every GET.
  exposeHeadRoutes: false
} as const

/** Turns every error, and every unknown route, into the contract's ErrorResponse and ValidationErrorResponse shapes. */
async function errorsPlugin (app: FastifyInstance): Promise<void> {
  app.setErrorHandler(handleError)
  app.setNotFoundHandler((request, reply) => reply.code(404).send({
    code: 'NOT_FOUND',
    message: `Route ${request.method} ${request.originalUrl.split('?')[0]} not found.`
  } satisfies ErrorBody))
}

export default fp(errorsPlugin, { name: 'errors' })
