import type { RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, FastifySchemaCompiler, onRequestHookHandler, RouteHandlerMethod } from 'fastify'
import * as bodyValidators from '../../generated/request-body-validators.js'
import * as parameterValidators from '../../generated/request-parameter-validators.js'
import { type RouteDefinition, routes } from '../../generated/routes.js'
import type { Validator } from '../../generated/validator.js'
import type { Handlers, OperationId } from '../handlers/handler.js'
import { requireRole } from './auth.js'

export interface RoutesPluginOptions {
  handlers: Handlers
  /** Request limits of the operations that have one. */
  rateLimits: Partial<Record<OperationId, RateLimitOptions>>
  /** Check every response against the contract before it leaves (CONTRACT_STRICT_RESPONSES). */
  strictResponses: boolean
}

const validators: Record<string, Validator> = { ...bodyValidators, ...parameterValidators }
const operationIds = new Map(routes.map((route) => [`${route.method} ${route.url}`, route.operationId]))

/**
 * Fastify's validator compiler, as a lookup: every request validator was generated ahead of time from the
 * contract, so nothing is compiled at startup (and Fastify's own Ajv compiler is never loaded).
 */
export const generatedValidators = (): FastifySchemaCompiler<unknown> => ({ method, url, httpPart }) => {
  const validator = validators[`${operationIds.get(`${method} ${url}`)}_${httpPart}`]
  if (validator === undefined) throw new Error(`No generated validator for ${method} ${url} ${httpPart}; run npm run generate`)
  return validator
}

function securityHooks (app: FastifyInstance, route: RouteDefinition): onRequestHookHandler[] {
  if (route.security.length === 0) return []
  return route.roles.length === 0 ? [app.authenticate] : [app.authenticate, requireRole(route.roles)]
}

/** One route per operation of the contract: match → authenticate → role → validate → handler. */
export default async function routesPlugin (app: FastifyInstance, options: RoutesPluginOptions): Promise<void> {
  // Loaded only when wanted, so that it costs production nothing, not even the loading.
  const { enforceResponseContract } = options.strictResponses ? await import('../response-contract.js') : { enforceResponseContract: undefined }
  for (const route of routes) {
    app.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      onRequest: securityHooks(app, route),
      onSend: enforceResponseContract === undefined ? [] : [enforceResponseContract(route)],
      handler: options.handlers[route.operationId] as RouteHandlerMethod,
      config: { rateLimit: options.rateLimits[route.operationId] ?? false }
    })
  }
}
