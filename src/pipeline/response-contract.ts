import type { onSendHookHandler } from 'fastify'
import type { RouteDefinition } from '../../generated/routes.js'
import { responseValidators } from '../../generated/response-validator-lookup.js'
import { INTERNAL_ERROR_BODY } from '../errors.js'

export interface SentResponse {
  statusCode: number
  headers: Record<string, unknown>
  /** The body as sent: a JSON string, or empty. */
  body: string
}

/** What is wrong with a response to `route` by the contract's lights, or undefined when nothing is. */
export function findResponseViolation (route: RouteDefinition, response: SentResponse): string | undefined {
  const status = String(response.statusCode)
  if (!route.statuses.includes(status)) {
    return `status ${status} is not declared for ${route.operationId} (declared: ${route.statuses.join(', ')})`
  }
  const missing = (route.requiredHeaders[status] ?? []).filter((name) => response.headers[name] === undefined)
  if (missing.length > 0) return `required header missing: ${missing.join(', ')}`
  const validate = responseValidators[route.operationId][status]
  if (validate === undefined) {
    return response.body === '' ? undefined : 'the contract declares no body for this status'
  }
  if (!String(response.headers['content-type']).startsWith('application/json')) {
    return `content-type ${String(response.headers['content-type'])} is not application/json`
  }
  let body: unknown
  try {
    body = JSON.parse(response.body)
  } catch {
    return 'the body is not JSON'
  }
  if (validate(body)) return undefined
  // Ajv always sets errors when validation fails.
  return `the body breaks the schema: ${validate.errors!.map((error) => `${error.instancePath} ${String(error.message)}`).join('; ')}`
}

/**
 * CONTRACT_STRICT_RESPONSES: an onSend hook that checks each response of `route` against the contract and sends
 * a logged 500 instead of one that breaks it. Only attached in development and test.
 */
export function enforceResponseContract (route: RouteDefinition): onSendHookHandler {
  return async (request, reply, payload) => {
    // The not-found handler's answer (a request routed into a sandbox that does not exist) is no answer of the route.
    if (request.is404) return payload
    const violation = findResponseViolation(route, {
      statusCode: reply.statusCode,
      headers: reply.getHeaders(),
      body: typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString() : ''
    })
    if (violation === undefined) return payload
    request.log.error({ operationId: route.operationId, statusCode: reply.statusCode, violation }, 'response breaks the contract')
    // The response being replaced may have had no body, and so no content type.
    reply.code(500).header('content-type', 'application/json; charset=utf-8')
    return JSON.stringify(INTERNAL_ERROR_BODY)
  }
}
