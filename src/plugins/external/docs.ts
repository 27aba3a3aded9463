import fastifyHelmet from '@fastify/helmet'
import fastifySwagger, { type StaticDocumentSpec } from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance, onRequestHookHandler } from 'fastify'
import { contractDocument } from '../../../generated/document.js'
import { FOLDED_RESPONSES_CSS, foldedResponses } from './swagger-ui-responses.js'

// Helmet's own default.
const STRICT_TRANSPORT_SECURITY = 'max-age=31536000; includeSubDomains'

// The docs tag (`openDocs`: the redirect that leads a browser here) is the contract's, but on this page Try it out
// could only follow it back to the page itself.
const DOCS_TAG_HIDDEN_CSS = '.opblock-tag-section:has(#operations-tag-docs) { display: none; }'

interface Server {
  readonly url: string
  readonly description: string
  readonly variables?: Record<string, { readonly default: string }>
}

// openapi.yaml's own servers, as `npm run generate` wrote them: the instance's base, and a sandbox's under it.
const [, SANDBOX_SERVER] = (contractDocument as { servers: readonly [Server, Server] }).servers

/**
 * The servers the public API's served contract names: the instance that served it (whatever its host, port or proxy
 * path), so that Swagger UI's "Try it out" calls it, and, while it serves sandboxes, a sandbox of it, which Swagger
 * UI's server list switches to.
 */
export function apiServers ({ sandboxes }: { readonly sandboxes: boolean }): Server[] {
  const servers: Server[] = [{ url: '/', description: 'The instance serving this document.' }]
  if (sandboxes) {
    servers.push({
      ...SANDBOX_SERVER,
      url: '/sandboxes/{sandboxId}',
      description: 'A sandbox of the instance serving this document: create one on its operations API (`POST /sandboxes`), then put its id here.'
    })
  }
  return servers
}

interface DocsPluginOptions {
  /** The contract, as `npm run generate` wrote it (its drift check holds the two equal). */
  readonly document: unknown
  /** The servers the served copy names in place of the contract's, which are the addresses SDKs default to. */
  readonly servers: readonly Server[]
  /** Refuses a request for the docs unless it may read them (the operations API's token); open to all without. */
  readonly guard?: onRequestHookHandler
}

/**
 * Serves a contract file itself (static mode: nothing is derived from the routes), and Swagger UI over it, at
 * `/openapi.json`, `/openapi.yaml` and `/docs`.
 */
export default async function docsPlugin (app: FastifyInstance, options: DocsPluginOptions): Promise<void> {
  if (options.guard !== undefined) app.addHook('onRequest', options.guard)
  // Browser-facing pages get helmet's headers (a Content Security Policy, no framing, no sniffing, no referrer);
  // registered inside this plugin, they cost the API's JSON responses nothing. But not its two that assume TLS: over
  // plain HTTP, upgrade-insecure-requests has a browser that reached the service by a name other than loopback fetch
  // the page's own scripts and styles over HTTPS, which the service does not serve (a blank page), and HSTS is
  // meaningless; HSTS is sent when the request came over TLS (by the socket, or a trusted proxy's X-Forwarded-Proto).
  await app.register(fastifyHelmet, { contentSecurityPolicy: { directives: { upgradeInsecureRequests: null } }, hsts: false })
  app.addHook('onRequest', async (request, reply) => {
    if (request.protocol === 'https') reply.header('strict-transport-security', STRICT_TRANSPORT_SECURITY)
  })
  const document = { ...options.document as StaticDocumentSpec['document'], servers: [...options.servers] }
  await app.register(fastifySwagger, { mode: 'static', specification: { document } })
  // The page is the contract's, by its title; the standalone top bar (Swagger's logo and a box that loads any other
  // document) is left out. The token given to Authorize is kept in the browser's local storage, so a reload does
  // not lose it. Error responses and headers are folded, so that an operation reads in a screen or two.
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    theme: { title: app.swagger().info.title, css: [{ filename: 'folded-responses.css', content: FOLDED_RESPONSES_CSS }, { filename: 'docs-tag-hidden.css', content: DOCS_TAG_HIDDEN_CSS }] },
    uiConfig: { layout: 'BaseLayout', persistAuthorization: true, plugins: [foldedResponses] }
  })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml').send(app.swagger({ yaml: true })))
}
