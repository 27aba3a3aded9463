// Calls of the operations API (ops/openapi.yaml) over HTTP, each answer checked against its contract.
import type { Test } from 'tap'
import { responseValidators } from '../../generated/operations/response-validator-lookup.js'
import type { RouteOperationId } from '../../generated/operations/routes.js'

/** Calls the operations API at `base` (with a JSON body when given) and checks the answer against its contract; a 204 is the one without a body. */
export async function opsCall (t: Test, base: string, operationId: RouteOperationId, method: string, path: string, body?: unknown): Promise<{ status: number, json: unknown }> {
  const response = await fetch(`${base}${path}`, body === undefined ? { method } : { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const text = await response.text()
  const json: unknown = text === '' ? undefined : JSON.parse(text)
  const validate = responseValidators[operationId][String(response.status)]
  const inShape = json === undefined ? response.status === 204 && validate === undefined : validate?.(json) === true
  t.ok(inShape, `${operationId} ${response.status} in the operations contract's shape: ${JSON.stringify(validate?.errors ?? 'undeclared status')}`)
  return { status: response.status, json }
}
