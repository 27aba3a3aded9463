// Every response a test sees is checked against the contract (Api.inject, and contractMiddleware for a typed
// client), and what was seen is recorded for the contract coverage check after the suite.
import { readFileSync } from 'node:fs'
import type { LightMyRequestResponse } from 'fastify'
import type { Middleware } from 'openapi-fetch'
import { parse } from 'yaml'
import { type RouteDefinition, routes } from '../../generated/routes.js'
import { findResponseViolation } from '../../src/pipeline/response-contract.js'
import { recordSeen } from './contract-coverage.js'

function routeFor (method: string, url: string): RouteDefinition | undefined {
  const path = url.split('?')[0] ?? url
  // Like Fastify's router, an empty path parameter still matches: /v1/items/ is getItem with itemId ''.
  return routes.find((route) => route.method === method &&
    new RegExp(`^${route.url.replace(/:[^/]+/g, '[^/]*')}$`).test(path))
}

/** openapi-fetch middleware: checks every response a typed client receives, like Api.inject does. */
export const contractMiddleware: Middleware = {
  async onResponse ({ request, response, schemaPath }) {
    const route = routes.find((candidate) => candidate.method === request.method &&
      candidate.url === schemaPath.replace(/\{([^}]+)\}/g, ':$1'))
    if (route === undefined) throw new ContractViolation(`${request.method} ${schemaPath} is not an operation of the contract`)
    recordSeen(route.operationId, response.status)
    const headers = Object.fromEntries(response.headers.entries())
    const violation = findResponseViolation(route, { statusCode: response.status, headers, body: await response.clone().text() })
    if (violation !== undefined) throw new ContractViolation(`${request.method} ${request.url} → ${response.status}: ${violation}`)
    return undefined
  }
}

export class ContractViolation extends Error {
  override name = 'ContractViolation'
}

/** Throws when a response is not one the contract allows for the operation that was called. */
export function assertMatchesContract (method: string, url: string, response: LightMyRequestResponse): void {
  const route = routeFor(method, url)
  const where = `${method} ${url} → ${response.statusCode}`
  if (route === undefined) {
    // Outside the contract's paths only the catch-all 404 is expected, in the ErrorResponse shape.
    const body = response.json() as { code?: unknown, message?: unknown }
    if (response.statusCode === 404 && body.code === 'NOT_FOUND' && typeof body.message === 'string') return
    throw new ContractViolation(`${where}: no operation matches and the response is not a NOT_FOUND error`)
  }
  recordSeen(route.operationId, response.statusCode)
  const violation = findResponseViolation(route, { statusCode: response.statusCode, headers: response.headers, body: response.body })
  if (violation !== undefined) throw new ContractViolation(`${where}: ${violation}\n${response.body}`)
}

export interface ContractOperation {
  operationId: string
  method: string
  /** The path as openapi.yaml writes it, with {parameters}. */
  path: string
}

/** Every operation that openapi.yaml itself declares under `paths`, read from the file, not from generated/. */
export function contractOperations (): ContractOperation[] {
  const document = parse(readFileSync('openapi.yaml', 'utf8')) as { paths: Record<string, Record<string, unknown>> }
  return Object.entries(document.paths).flatMap(([path, pathItem]) => Object.entries(pathItem).flatMap(([method, operation]) =>
    typeof operation === 'object' && operation !== null && 'operationId' in operation
      ? [{ operationId: String(operation.operationId), method: method.toUpperCase(), path }]
      : []))
}
