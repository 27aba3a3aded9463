import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import type { TraceContext } from '../../observability/trace-context.js'

/** The process's tracer, as src/app/tracing.ts starts it. */
export interface Tracing extends TraceContext {
  /** Gives each request a span; registered before the routes. */
  instrument: FastifyPluginAsync
  /** Exports the spans not sent yet, and stops. */
  shutdown: () => Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    tracing: TraceContext
  }
}

const UNTRACED: TraceContext = {
  traceparent: () => undefined,
  within: (_traceparent, work) => work()
}

interface TracingPluginOptions {
  /** Undefined when tracing is off (no OTLP endpoint is configured). */
  tracing: Tracing | undefined
}

/** Decorates the app with the trace context (a no-op one when tracing is off) and, when it is on, traces each request. */
async function tracingPlugin (app: FastifyInstance, { tracing }: TracingPluginOptions): Promise<void> {
  app.decorate('tracing', tracing === undefined ? UNTRACED : { traceparent: tracing.traceparent, within: tracing.within })
  if (tracing !== undefined) await app.register(tracing.instrument)
}

export default fp(tracingPlugin, { name: 'tracing' })
