import type { ServerOptions } from 'node:http'

interface ConnectionLimits {
  readonly requestTimeout: number
  readonly http: ServerOptions
  readonly keepAliveTimeout: number
}

// How long an idle kept-alive connection stays open: longer than the usual balancer's idle timeout (60 s), so that
// the balancer, not the service, closes it, and never while it sends a request.
const KEEP_ALIVE_TIMEOUT_MS = 72_000

/**
 * What bounds a client's connection, on the API's port and on the operations port alike. No socket inactivity
 * timeout (connectionTimeout): it would also cut a request the service is still working on (a sign-in waiting for
 * its hash, a store slow to list) and leave its client an empty reply. Slow clients meet requestTimeout and
 * headersTimeout (a connection that sends nothing included), idle kept-alive ones keepAliveTimeout.
 */
export function connectionLimits (requestTimeoutMs: number): ConnectionLimits {
  return {
    requestTimeout: requestTimeoutMs,
    // Node checks request deadlines on this interval (30 s by default, which let a slow client run up to twice its
    // deadline): a request that has not fully arrived is answered 408 at most REQUEST_TIMEOUT_MS + 1 s after it
    // began. Node enforces the deadline on a body only while headersTimeout is no longer than requestTimeout.
    http: { connectionsCheckingInterval: 1_000, headersTimeout: requestTimeoutMs },
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS
  }
}
