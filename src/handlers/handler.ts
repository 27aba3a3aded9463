import type { RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault, RouteHandlerMethod } from 'fastify'
import type { operations } from '../../generated/openapi.js'
import type { DefaultedParameters, RouteOperationId as OperationId } from '../../generated/routes.js'
import type { Serialized } from '../domain/serialized.js'

/** What openapi-typescript generates for one operation. */
interface OperationTypes {
  parameters: { query?: unknown, path?: unknown, header?: unknown }
  requestBody?: unknown
  responses: object
}

// A JSON body as its type; a text one (the operations API's metrics) as a string.
type Content<T> = T extends { content: { 'application/json': infer Body } } ? Body : T extends { content: { 'text/plain': infer Text } } ? Text : undefined
// A body may be sent as the contract's serializer wrote it, ahead of time.
type Sendable<T> = [T] extends [undefined] ? T : T | Serialized<T>
// The request validators fill in defaulted parameters, so a handler always sees them.
type WithDefaults<T, Keys extends PropertyKey> = T & { [K in Keys & keyof T]-?: NonNullable<T[K]> }
// Header parameters by the lower-cased names Node gives them.
type LowerCased<T> = [T] extends [never] ? object : { [K in keyof T as Lowercase<K & string>]: T[K] }

/** Fastify's route generics for one operation, all taken from its contract: a reply is checked per status code. */
export interface ContractRoute<Operation extends OperationTypes, Defaulted extends PropertyKey> {
  Body: Content<Operation['requestBody']>
  Querystring: WithDefaults<NonNullable<Operation['parameters']['query']>, Defaulted>
  Params: NonNullable<Operation['parameters']['path']>
  Headers: LowerCased<NonNullable<Operation['parameters']['header']>>
  Reply: { [Status in keyof Operation['responses']]: Sendable<Content<Operation['responses'][Status]>> }
}

/** The handler of one operation of a contract, given its generated types and defaulted parameters. */
export type ContractHandler<Operation extends OperationTypes, Defaulted extends PropertyKey> = RouteHandlerMethod<
  RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, ContractRoute<Operation, Defaulted>
>

/** The handler of one operation of the public API (openapi.yaml). */
export type Handler<Id extends OperationId> = ContractHandler<operations[Id], DefaultedParameters[Id]>

/** One handler per operation of the contract: a missing, extra or misspelled one does not compile. */
export type Handlers = { [Id in OperationId]: Handler<Id> }
