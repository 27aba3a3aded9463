import type { ServerResponse } from 'node:http'
import { Server, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { AppConfig } from '../../config/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Where the service is in its life: readiness and the webhooks plugin read it. */
    lifecycle: {
      draining: boolean
      /** Once draining: when the connections still open are closed, whatever they are doing (ms since the epoch). */
      shutdownDeadline: number
    }
  }
}

type ShutdownPluginOptions = Pick<AppConfig, 'shutdownTimeoutMs'>

// Once shutdown begins, kept-alive connections stay open this long (at most a quarter of SHUTDOWN_TIMEOUT_MS), so
// that a request already on its way over one is answered, with Connection: close, rather than met by a reset.
const DRAIN_GRACE_MS = 1000
const DRAIN_POLL_MS = 10
// The share of SHUTDOWN_TIMEOUT_MS after which the connections still open are closed, whatever they are doing, so
// that the process ends by itself (exit 0) before close-with-grace gives up on it.
const SHUTDOWN_SHARE_BEFORE_FORCE = 0.8

/**
 * Shutdown drains: readiness turns false, and new connections are refused; every response still to be written, or written while draining, says
 * Connection: close, so no client sends another request over a connection about to close; kept-alive connections
 * get a short grace for requests already on their way; then the connections with no request in progress (idle, or
 * a client stuck in its headers) are closed, the others when their response is written, and any left at 80 % of
 * SHUTDOWN_TIMEOUT_MS.
 */
async function shutdownPlugin (app: FastifyInstance, options: ShutdownPluginOptions): Promise<void> {
  app.decorate('lifecycle', { draining: false, shutdownDeadline: Infinity })
  const connections = new Set<Socket>()
  // The response of each connection's latest request: the only way to tell, at shutdown, which ones are in flight.
  const responses = new WeakMap<Socket, ServerResponse>()
  app.server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  // A hook rather than a second 'request' listener on the server, which makes Node copy the listener list on
  // every request (docs/performance.md).
  app.addHook('onRequest', (request, reply, done) => {
    responses.set(request.raw.socket, reply.raw)
    done()
  })
  // The response of the request in progress on a connection, if any: one not written yet (this service writes
  // each response at once, headers and body).
  const unwritten = (socket: Socket): ServerResponse | undefined => {
    const response = responses.get(socket)
    return response?.headersSent === false ? response : undefined
  }
  let forceClose: NodeJS.Timeout | undefined
  app.addHook('preClose', async () => {
    app.lifecycle.draining = true
    // No new connection from now on: one taken during the grace would be closed at its end with its first request
    // on the way. Refused, a connection has sent nothing, and its client may send it elsewhere. net's close, not
    // http's, which would also close the idle kept-alive connections at once, under requests on their way.
    if (app.server.listening) Server.prototype.close.call(app.server)
    const forceCloseAfterMs = options.shutdownTimeoutMs * SHUTDOWN_SHARE_BEFORE_FORCE
    app.lifecycle.shutdownDeadline = Date.now() + forceCloseAfterMs
    forceClose = setTimeout(() => { for (const socket of connections) socket.destroy() }, forceCloseAfterMs).unref()
    // Fastify adds Connection: close to the responses of requests that arrive from now on.
    for (const socket of connections) unwritten(socket)?.setHeader('connection', 'close')
    const graceEnds = Date.now() + Math.min(DRAIN_GRACE_MS, options.shutdownTimeoutMs / 4)
    while (connections.size > 0 && Date.now() < graceEnds) await sleep(DRAIN_POLL_MS)
    for (const socket of connections) {
      if (unwritten(socket) === undefined) socket.destroy()
    }
  })
  app.addHook('onClose', async () => { clearTimeout(forceClose) })
}

export default fp(shutdownPlugin, { name: 'shutdown' })
