// Calls of the operations API (ops/openapi.yaml) over HTTP, each answer checked against its contract.
import type { Test } from 'tap'
import { responseValidators } from '../../generated/operations/response-validator-lookup.js'
import type { RouteOperationId } from '../../generated/operations/routes.js'

/**
 * Calls the operations API at `base` (with a body when given: as JSON, or as the text it is under another
 * `contentType`) and checks the answer against its contract; a 204 is the one without a body.
 */
export async function opsCall (t: Test, base: string, operationId: RouteOperationId, method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<{ status: number, json: unknown }> {
  const text = contentType === 'application/json' ? JSON.stringify(body) : String(body)
  const response = await fetch(`${base}${path}`, body === undefined ? { method } : { method, headers: { 'content-type': contentType }, body: text })
  const answer = await response.text()
  const json: unknown = answer === '' ? undefined : JSON.parse(answer)
  const validate = responseValidators[operationId][String(response.status)]
  const inShape = json === undefined ? response.status === 204 && validate === undefined : validate?.(json) === true
  t.ok(inShape, `${operationId} ${response.status} in the operations contract's shape${inShape ? '' : `: ${validate === undefined ? 'undeclared status' : JSON.stringify(validate.errors)}`}`)
  return { status: response.status, json }
}
