import fastifyHelmet from '@fastify/helmet'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import { contract } from '../../generated/contract.js'

/** Serves the contract itself (static mode: nothing is derived from the routes), and Swagger UI over it. */
export default async function docsPlugin (app: FastifyInstance): Promise<void> {
  // Browser-facing pages get helmet's headers (a Content Security Policy, no framing, no sniffing, no referrer);
  // registered inside this plugin, they cost the API's JSON responses nothing.
  await app.register(fastifyHelmet)
  // The contract's server is the address SDKs default to; the copy served here names this instance (whatever its
  // host, port or proxy path), so that Swagger UI's "Try it out" calls the instance that served the page.
  const served = { ...contract, servers: [{ url: '/', description: 'The instance serving this document.' }] }
  await app.register(fastifySwagger, { mode: 'static', specification: { document: served as never } })
  // The token given to Authorize is kept in the browser's local storage, so a reload does not lose it.
  await app.register(fastifySwaggerUi, { routePrefix: '/docs', uiConfig: { persistAuthorization: true } })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml').send(app.swagger({ yaml: true })))
}
