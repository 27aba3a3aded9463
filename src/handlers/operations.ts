import type { operations } from '../../generated/operations/openapi.js'
import type { DefaultedParameters, RouteOperationId } from '../../generated/operations/routes.js'
import { notFound } from '../errors.js'
import type { DeadLetter } from '../store/store.js'
import type { ContractHandler } from './handler.js'

type OperationsHandler<Id extends RouteOperationId> = ContractHandler<operations[Id], DefaultedParameters[Id]>

/** One handler per operation of the operations API (ops/openapi.yaml): a missing or extra one does not compile. */
export type OperationsHandlers = { [Id in RouteOperationId]: OperationsHandler<Id> }

type DeadLetterBody = operations['listDeadLetters']['responses'][200]['content']['application/json']['subscribers'][number]['deadLetters'][number]

export const getMetrics: OperationsHandler<'getMetrics'> = async (request, reply) => {
  const { metrics } = request.server
  return await reply.type(metrics.contentType).code(200).send(await metrics.metrics())
}

/** The configured subscribers the request names: the one of `subscriber`, or all when it is left out. */
function selected (subscribers: ReadonlyMap<string, string>, subscriber: string | undefined): Array<[name: string, id: string]> {
  if (subscriber === undefined) return [...subscribers]
  const id = subscribers.get(subscriber)
  if (id === undefined) throw notFound(`Webhook subscriber ${subscriber}`)
  return [[subscriber, id]]
}

const deadLetterBody = ({ event, attempts, failure, failedAt }: DeadLetter): DeadLetterBody => ({
  eventId: event.id,
  channel: event.channel,
  attempts,
  failure,
  failedAt: new Date(failedAt).toISOString(),
  event: JSON.parse(event.body) as Record<string, unknown>
})

export const listDeadLetters: OperationsHandler<'listDeadLetters'> = async (request, reply) => {
  const { outbox } = request.server.store
  const subscribers = await Promise.all(selected(request.server.webhookSubscribers, request.query.subscriber).map(async ([subscriber, id]) => {
    const { deadLetters, total } = await outbox.deadLetters(id, request.query.limit)
    return { subscriber, total, deadLetters: deadLetters.map(deadLetterBody) }
  }))
  return await reply.code(200).send({ subscribers })
}

export const redeliverDeadLetters: OperationsHandler<'redeliverDeadLetters'> = async (request, reply) => {
  const { outbox } = request.server.store
  const now = request.server.store.now()
  const counts = await Promise.all(selected(request.server.webhookSubscribers, request.body.subscriber).map(async ([, id]) =>
    await outbox.redeliver(id, request.body.eventIds, now)))
  return await reply.code(200).send({ redelivered: counts.reduce((sum, count) => sum + count, 0) })
}

/** Every operation of the operations API, by operationId. */
export const operationsHandlers: OperationsHandlers = { getMetrics, listDeadLetters, redeliverDeadLetters }
