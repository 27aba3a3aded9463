import fastifyHelmet from '@fastify/helmet'
import fastifySwagger, { type StaticDocumentSpec } from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import { contractDocument } from '../../../generated/document.js'
import { FOLDED_RESPONSES_CSS, foldedResponses } from './swagger-ui-responses.js'

// Helmet's own default.
const STRICT_TRANSPORT_SECURITY = 'max-age=31536000; includeSubDomains'

// openapi.yaml, as `npm run generate` wrote it (its drift check holds the two equal).
const CONTRACT = contractDocument as StaticDocumentSpec['document']

/** Serves the contract file itself (static mode: nothing is derived from the routes), and Swagger UI over it. */
export default async function docsPlugin (app: FastifyInstance): Promise<void> {
  // Browser-facing pages get helmet's headers (a Content Security Policy, no framing, no sniffing, no referrer);
  // registered inside this plugin, they cost the API's JSON responses nothing. But not its two that assume TLS: over
  // plain HTTP, upgrade-insecure-requests has a browser that reached the service by a name other than loopback fetch
  // the page's own scripts and styles over HTTPS, which the service does not serve (a blank page), and HSTS is
  // meaningless; HSTS is sent when the request came over TLS (by the socket, or a trusted proxy's X-Forwarded-Proto).
  await app.register(fastifyHelmet, { contentSecurityPolicy: { directives: { upgradeInsecureRequests: null } }, hsts: false })
  app.addHook('onRequest', async (request, reply) => {
    if (request.protocol === 'https') reply.header('strict-transport-security', STRICT_TRANSPORT_SECURITY)
  })
  // The contract's server is the address SDKs default to; the copy served here names this instance (whatever its
  // host, port or proxy path), so that Swagger UI's "Try it out" calls the instance that served the page.
  await app.register(fastifySwagger, {
    mode: 'static',
    specification: {
      document: { ...CONTRACT, servers: [{ url: '/', description: 'The instance serving this document.' }] }
    }
  })
  // The page is the contract's, by its title; the standalone top bar (Swagger's logo and a box that loads any other
  // document) is left out. The token given to Authorize is kept in the browser's local storage, so a reload does
  // not lose it. Error responses and headers are folded, so that an operation reads in a screen or two.
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    theme: { title: app.swagger().info.title, css: [{ filename: 'folded-responses.css', content: FOLDED_RESPONSES_CSS }] },
    uiConfig: { layout: 'BaseLayout', persistAuthorization: true, plugins: [foldedResponses] }
  })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml').send(app.swagger({ yaml: true })))
}
