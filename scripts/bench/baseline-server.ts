// The bound the service is measured against: bare Fastify serving a fixed page of items with the same response
// schema (so the same serializer). BASELINE=jwt adds the usual auth setup, `await request.jwtVerify()` in onRequest;
// BASELINE=logger adds only Fastify's logger at the service's benchmark level, which writes no line per request.
import fastifyJwt from '@fastify/jwt'
import Fastify from 'fastify'
import { routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'

const listItems = routes.find((route) => route.operationId === 'listItems')
const page: unknown = JSON.parse(process.env.BASELINE_PAGE ?? '{}')
const app = Fastify({ logger: process.env.BASELINE === 'logger' ? { level: 'warn' } : false })

if (process.env.BASELINE === 'jwt') {
  await app.register(fastifyJwt, { secret: String(process.env.JWT_SECRET) })
  app.addHook('onRequest', async (request) => { await request.jwtVerify() })
}
// The route table's schemas refer to the contract's component schemas by $id, as in the service.
for (const schema of Object.values(schemas)) app.addSchema(schema)
app.get('/v1/items', { schema: { response: { 200: listItems?.schema.response['200'] } } }, async () => page)

const address = await app.listen({ host: '127.0.0.1', port: 0 })
console.log(`listening at ${address}`)
process.on('SIGTERM', () => { void app.close() })
