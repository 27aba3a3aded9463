import type { onErrorHookHandler, onRequestHookHandler, onResponseHookHandler, onSendHookHandler, preHandlerHookHandler } from 'fastify'
import type { RouteDefinition } from '../../generated/routes.js'

/**
 * What one capability adds to one route, by the Fastify phase each hook runs in. The pipeline puts the steps of
 * every capability that applies to a route in one order (`src/pipeline/index.ts`); no capability adds hooks to
 * routes itself.
 */
export interface RouteStep {
  readonly onRequest?: readonly onRequestHookHandler[]
  readonly preHandler?: readonly preHandlerHookHandler[]
  readonly onSend?: readonly onSendHookHandler[]
  readonly onResponse?: readonly onResponseHookHandler[]
  readonly onError?: readonly onErrorHookHandler[]
}

/** What every contract's route table says of a route: the public API's (generated/routes.ts) and the operations API's. */
export interface ContractRoute {
  readonly operationId: string
  readonly method: RouteDefinition['method']
  readonly url: string
  readonly security: readonly string[]
  readonly deprecation?: RouteDefinition['deprecation']
  readonly schema: RouteDefinition['schema']
}

/**
 * A capability's step for a route, made once when the route is registered from what its operation declares in
 * the contract; undefined where the capability does not apply (the route then runs none of its code).
 */
export type StepFor<Route extends ContractRoute = RouteDefinition> = (route: Route) => RouteStep | undefined

/** The contract's path template of a route (`/v1/items/{itemId}` for Fastify's `/v1/items/:itemId`): how metrics and traces name it. */
export const contractPath = (url: string): string => url.replace(/:(\w+)/g, '{$1}')
