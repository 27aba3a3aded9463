// OpenTelemetry tracing. The server imports this module only when an OTLP endpoint is configured, and before the
// rest of the service loads: the Redis and log instrumentations patch those modules as they load. A service
// without the variables loads none of it.
import { register } from 'node:module'
import { FastifyOtelInstrumentation } from '@fastify/otel'
import { context, propagation, ROOT_CONTEXT, type Span } from '@opentelemetry/api'
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { registerInstrumentations } from '@opentelemetry/instrumentation'
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis'
import { PinoInstrumentation } from '@opentelemetry/instrumentation-pino'
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici'
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { TracingConfig } from '../config/config.js'
import { contractPath } from '../pipeline/step.js'
import type { Tracing } from '../plugins/external/tracing.js'

// The service's only ES-module import that an instrumentation patches (ioredis, a CommonJS package imported from
// ours); everything else passes the loader hook untouched.
const PATCHED_IMPORTS = ['ioredis']

function nameRequestSpan (span: Span, request: FastifyRequest): void {
  const { url, config } = request.routeOptions
  // No route (a 404): the method alone, as OpenTelemetry's HTTP conventions name such a span.
  if (url === undefined) {
    span.updateName(request.method)
    return
  }
  const route = contractPath(url)
  span.updateName(`${request.method} ${route}`)
  span.setAttribute('http.route', route)
  const { operationId } = config
  if (operationId !== undefined) span.setAttribute('openapi.operation_id', operationId)
}

/**
 * Starts the process's tracer: spans batched to the OTLP endpoint (the exporter reads OTEL_EXPORTER_OTLP_* itself,
 * the provider OTEL_TRACES_SAMPLER and OTEL_BSP_*), an incoming W3C traceparent continued, Redis commands and webhook
 * attempts as child spans of the request (or the event) they serve, and the active span's ids on every log line.
 */
export function startTracing (config: TracingConfig): Tracing {
  register('import-in-the-middle/hook.mjs', import.meta.url, { data: { include: PATCHED_IMPORTS } })
  const exporter = config.protocol === 'http/json' ? new JsonExporter() : new ProtobufExporter()
  const provider = new NodeTracerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': config.serviceName })).merge(detectResources({ detectors: [envDetector] })),
    spanProcessors: [new BatchSpanProcessor(exporter)]
  })
  provider.register()
  // Per-hook spans are off: they would double the spans of a request and tell little that the request span does not.
  const requests = new FastifyOtelInstrumentation({ instrumentHooks: false, instrumentHandler: false, requestHook: nameRequestSpan })
  registerInstrumentations({
    instrumentations: [
      requests,
      // Only the commands of a traced request or delivery: the webhook poll and the session sweep start no traces.
      // Only the command's name: its arguments hold keys named after emails and values such as password hashes.
      new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command) => command }),
      new UndiciInstrumentation({
        requireParentforSpans: true,
        // A subscriber's URL may carry a secret in its query; spans name only where the delivery went.
        startSpanHook: (request) => {
          const url = new URL(request.path, request.origin)
          if (url.search === '') return {}
          return { 'url.full': `${url.origin}${url.pathname}`, 'url.query': 'REDACTED' }
        }
      }),
      new PinoInstrumentation()
    ]
  })

  return {
    instrument: fp(async (app: FastifyInstance) => {
      await app.register(requests.plugin())
      // The request's context is lost while its body streams in (Node emits its chunks outside it); the hooks and
      // the handler after parsing run in it again, so their Redis commands and events belong to the request's trace.
      // @fastify/otel would do it by giving each hook and the handler a span of its own.
      app.addHook('preValidation', (request, _reply, done) => {
        // Set for every request: @fastify/otel's onRequest hook made it, and no route switches tracing off.
        context.with(request.opentelemetry().context!, done)
      })
    }, { name: 'request-spans' }),
    traceparent () {
      const carrier: { traceparent?: string } = {}
      propagation.inject(context.active(), carrier)
      return carrier.traceparent
    },
    within (traceparent, work) {
      // Without a traceparent, the root context: the work starts no trace (nor spans, which all need a parent).
      return context.with(propagation.extract(ROOT_CONTEXT, { traceparent }), work)
    },
    async shutdown () {
      await provider.shutdown()
    }
  }
}
