import { serviceUnavailable } from '../errors.js'
import { StoreUnavailableError } from '../store/store.js'
import type { Handler } from './handler.js'

export const checkLiveness: Handler<'checkLiveness'> = async (_request, reply) =>
  reply.code(200).send({ status: 'ok' })

export const checkReadiness: Handler<'checkReadiness'> = async (request, reply) => {
  if (request.server.lifecycle.draining) throw serviceUnavailable('The service is shutting down.')
  // Answered as every request the store cannot serve is: with when to ask again.
  if (!request.server.store.available()) throw new StoreUnavailableError('the store is unreachable')
  return reply.code(200).send({ status: 'ok' })
}
