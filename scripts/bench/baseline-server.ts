// The bounds the service is measured against: bare Fastify answering fixed payloads with the contract's schemas
// (so the same validators' rules and the same serializers). The list answers a page of items, as a page does in the
// service; the get, create and edit answer one item, after validating the same path parameter and body as the
// service does. BASELINE=jwt adds the usual auth setup, `await request.jwtVerify()` in onRequest; BASELINE=usual
// adds @fastify/rate-limit to it as it is usually set up (one limit per client address on every route, its three
// x-ratelimit-* headers on every response; its quota out of the benchmark's reach, as the service's are);
// BASELINE=logger adds only Fastify's logger at the service's benchmark level, which writes no line per request.
// As in the service, first of all: one of Node's tick objects kept alive, so that neither server is measured in the
// slower state Node falls into at random otherwise (src/runtime/tick-object-pin.ts).
import '../../src/runtime/tick-object-pin.js'
import fastifyJwt from '@fastify/jwt'
import fastifyRateLimit from '@fastify/rate-limit'
import Fastify from 'fastify'
import { type RouteOperationId, routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'

const page = JSON.parse(process.env.BASELINE_PAGE ?? '{}') as { data: unknown[] }
const item = page.data[0]
const app = Fastify({ logger: process.env.BASELINE === 'logger' ? { level: 'warn' } : false })

if (process.env.BASELINE === 'jwt' || process.env.BASELINE === 'usual') {
  await app.register(fastifyJwt, { secret: String(process.env.JWT_SECRET) })
  app.addHook('onRequest', async (request) => { await request.jwtVerify() })
}
if (process.env.BASELINE === 'usual') await app.register(fastifyRateLimit, { max: 1_000_000_000, timeWindow: 60_000 })
// The route table's schemas refer to the contract's component schemas by $id, as in the service.
for (const schema of Object.values(schemas)) app.addSchema(schema)

// The list keeps to the bare minimum: no query validation, the response schema only.
const answers: Array<{ operationId: RouteOperationId, status: number, payload: unknown, validate: boolean }> = [
  { operationId: 'listItems', status: 200, payload: page, validate: false },
  { operationId: 'getItem', status: 200, payload: item, validate: true },
  { operationId: 'createItem', status: 201, payload: item, validate: true },
  { operationId: 'updateItem', status: 200, payload: item, validate: true }
]
for (const { operationId, status, payload, validate } of answers) {
  const route = routes.find((candidate) => candidate.operationId === operationId)
  if (route === undefined) throw new Error(`The contract has no ${operationId}`)
  const { params, body, response } = route.schema
  app.route({
    method: route.method,
    url: route.url,
    schema: {
      ...(validate && params !== undefined ? { params } : {}),
      ...(validate && body !== undefined ? { body } : {}),
      response: { [status]: response[status] }
    },
    handler: async (_request, reply) => await reply.code(status).send(payload)
  })
}

const address = await app.listen({ host: '127.0.0.1', port: 0 })
console.log(`listening at ${address}`)
process.on('SIGTERM', () => { void app.close() })
