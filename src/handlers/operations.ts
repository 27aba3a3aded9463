import type { RouteHandlerMethod } from 'fastify'
import type { RouteOperationId } from '../../generated/operations/routes.js'

/** One handler per operation of the operations API (ops/openapi.yaml): a missing or extra one does not compile. */
export type OperationsHandlers = { [Id in RouteOperationId]: RouteHandlerMethod }

export const getMetrics: RouteHandlerMethod = async (request, reply) => {
  const { metrics } = request.server
  return await reply.type(metrics.contentType).send(await metrics.metrics())
}

/** Every operation of the operations API, by operationId. */
export const operationsHandlers: OperationsHandlers = { getMetrics }
