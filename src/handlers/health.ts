import { serviceUnavailable } from '../errors.js'
import type { Handler } from './handler.js'

export const checkLiveness: Handler<'checkLiveness'> = async (_request, reply) =>
  reply.code(200).send({ status: 'ok' })

export const checkReadiness: Handler<'checkReadiness'> = async (request, reply) => {
  if (request.server.lifecycle.draining) throw serviceUnavailable('The service is shutting down.')
  if (!request.server.store.available()) throw serviceUnavailable('The data store is unreachable.')
  return reply.code(200).send({ status: 'ok' })
}
