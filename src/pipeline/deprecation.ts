import type { onSendHookHandler } from 'fastify'
import type { RouteDefinition } from '../../generated/routes.js'
import type { RouteStep } from './step.js'
import type { CounterMetric, Metrics } from '../observability/metrics.js'

/** What the step reads of a route: any contract's (the public one's, the operations API's, a fixture's). */
type DeprecatedRoute = Pick<RouteDefinition, 'deprecation'> & { readonly operationId: string }

/**
 * The step of a deprecated operation (the contract's `deprecated: true`): every response of it, errors included,
 * carries `Deprecation` (RFC 9745), `Sunset` (RFC 8594) when the operation has an end, and a `Link` to where the
 * deprecation is documented, so a client sees it on the wire before the operation goes; and each call is counted
 * by operation (`items_service_deprecated_calls_total`), so an operator sees who still calls it. The fields'
 * values were made by the generator; an operation that is not deprecated runs none of this.
 */
export function deprecationStep (metrics: Metrics): (route: DeprecatedRoute) => RouteStep | undefined {
  let calls: CounterMetric<'operation'> | undefined
  return ({ deprecation, operationId }) => {
    if (deprecation === undefined) return undefined
    calls ??= metrics.counter({
      name: 'items_service_deprecated_calls_total',
      help: 'Calls to operations the contract marks deprecated, by operation: who still calls what will go.',
      labelNames: ['operation']
    })
    const counted = calls.labels({ operation: operationId })
    const announce: onSendHookHandler = (_request, reply, payload, done) => {
      counted.inc()
      reply.header('deprecation', deprecation.deprecation).header('link', deprecation.link)
      if (deprecation.sunset !== undefined) reply.header('sunset', deprecation.sunset)
      done(null, payload)
    }
    return { onSend: [announce] }
  }
}
