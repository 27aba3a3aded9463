import { monitorEventLoopDelay } from 'node:perf_hooks'
import fastifyUnderPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    /** The event loop's mean delay over the last sample, in milliseconds, measured since the app was ready. */
    eventLoopDelayMs: () => number
  }
}

const SAMPLE_INTERVAL_MS = 250
const EVENT_LOOP_RESOLUTION_MS = 10

/**
 * The process's load, as the load-shedding step reads it (src/pipeline/load-shedding.ts): @fastify/under-pressure's
 * memory samples (`app.memoryUsage()`), and the event loop's delay since the app was ready (`app.eventLoopDelayMs()`).
 */
async function underPressurePlugin (app: FastifyInstance): Promise<void> {
  // Under-pressure only samples memory here (no limits given, so it adds no hook of its own, whose reading of
  // request.routeOptions built an object on every request); the step sheds from its samples.
  await app.register(fastifyUnderPressure, { sampleInterval: SAMPLE_INTERVAL_MS })
  // The event loop's delay counts from the moment the app is ready. Under-pressure's own measure starts at its
  // registration and cannot be started later or reset: it took in the start's synchronous work (compiling the
  // contract's schemas), which on a busy machine read as an overload and shed a fresh instance's first requests.
  const delay = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS })
  let eventLoopDelayMs = 0
  // Every interval has a reading: the histogram's timer falls due before the sampler's, even after the loop was
  // held past both.
  const sampleDelay = (): void => {
    eventLoopDelayMs = Math.max(0, delay.mean / 1e6 - EVENT_LOOP_RESOLUTION_MS)
    delay.reset()
  }
  let sampler: NodeJS.Timeout | undefined
  app.decorate('eventLoopDelayMs', () => eventLoopDelayMs)
  app.addHook('onReady', (done) => {
    delay.enable()
    sampler = setInterval(sampleDelay, SAMPLE_INTERVAL_MS).unref()
    done()
  })
  app.addHook('onClose', (_app, done) => {
    clearInterval(sampler)
    delay.disable()
    done()
  })
}

export default fp(underPressurePlugin, { name: 'under-pressure' })
