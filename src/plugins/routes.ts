import type { RateLimitOptions } from '@fastify/rate-limit'
import type { FastifyInstance, onRequestHookHandler, RouteHandlerMethod } from 'fastify'
import * as bodyValidators from '../../generated/request-body-validators.js'
import * as parameterValidators from '../../generated/request-parameter-validators.js'
import type { Validator } from '../../generated/validator.js'
import { type RouteDefinition, routes } from '../../generated/routes.js'
import type { Handlers, OperationId } from '../handlers/handler.js'
import { enforceResponseContract } from '../response-contract.js'
import { requireRole } from './auth.js'

export interface RoutesPluginOptions {
  handlers: Handlers
  /** Request limits of the operations that have one. */
  rateLimits: Partial<Record<OperationId, RateLimitOptions>>
  /** Check every response against the contract before it leaves (CONTRACT_STRICT_RESPONSES). */
  strictResponses: boolean
}

const validators: Record<string, Validator> = { ...bodyValidators, ...parameterValidators }

// The validators were generated ahead of time from the same schemas, so nothing is compiled at startup.
export function requestValidator (route: RouteDefinition, httpPart: string | undefined): Validator {
  const validator = validators[`${route.operationId}_${httpPart}`]
  if (validator === undefined) throw new Error(`No generated validator for ${route.operationId} ${httpPart}; run npm run generate`)
  return validator
}

function securityHooks (app: FastifyInstance, route: RouteDefinition): onRequestHookHandler[] {
  if (route.security.length === 0) return []
  return route.roles.length === 0 ? [app.authenticate] : [app.authenticate, requireRole(route.roles)]
}

/** One route per operation of the contract: match → authenticate → role → validate → handler. */
export default async function routesPlugin (app: FastifyInstance, options: RoutesPluginOptions): Promise<void> {
  for (const route of routes) {
    app.route({
      method: route.method,
      url: route.url,
      schema: route.schema,
      onRequest: securityHooks(app, route),
      validatorCompiler: ({ httpPart }) => requestValidator(route, httpPart),
      onSend: options.strictResponses ? [enforceResponseContract(route)] : [],
      handler: options.handlers[route.operationId] as RouteHandlerMethod,
      config: { rateLimit: options.rateLimits[route.operationId] ?? false }
    })
  }
}
