import type { RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault, RouteHandlerMethod } from 'fastify'
import type { operations } from '../../generated/openapi.js'
import type { DefaultedParameters, RouteOperationId as OperationId } from '../../generated/routes.js'

type JsonContent<T> = T extends { content: { 'application/json': infer Body } } ? Body : undefined
type Parameters<Id extends OperationId, Location extends 'path' | 'query'> =
  NonNullable<operations[Id]['parameters'][Location]>
// The request validators fill in defaulted parameters, so a handler always sees them.
type WithDefaults<T, Keys extends PropertyKey> = T & { [K in Keys & keyof T]-?: NonNullable<T[K]> }
type Responses<Id extends OperationId> = operations[Id]['responses']

/** Fastify's route generics for one operation, all taken from the contract: a reply is checked per status code. */
export interface OperationRoute<Id extends OperationId> {
  Body: JsonContent<operations[Id]['requestBody']>
  Querystring: WithDefaults<Parameters<Id, 'query'>, DefaultedParameters[Id]>
  Params: Parameters<Id, 'path'>
  Reply: { [Status in keyof Responses<Id>]: JsonContent<Responses<Id>[Status]> }
}

export type Handler<Id extends OperationId> = RouteHandlerMethod<
  RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, OperationRoute<Id>
>

/** One handler per operation of the contract: a missing, extra or misspelled one does not compile. */
export type Handlers = { [Id in OperationId]: Handler<Id> }
