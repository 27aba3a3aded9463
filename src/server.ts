// First, before any other module loads: see the module.
import './runtime/tick-object-pin.js'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { type AppConfig, loadConfig } from './config/config.js'
import { ListenError } from './errors.js'

let config: AppConfig
try {
  config = loadConfig()
} catch (error) {
  console.error((error as Error).message)
  process.exit(1)
}

// Before the rest of the service loads, so that its instrumentations see the modules they patch load.
const tracing = config.tracing === undefined ? undefined : (await import('./app/tracing.js')).startTracing(config.tracing)
const { buildApp } = await import('./app/app.js')

let app: FastifyInstance
try {
  app = await buildApp(config, tracing === undefined ? {} : { tracing })
} catch (error) {
  // A store that cannot be reached (Redis) stops the start, in one line.
  console.error((error as Error).message)
  process.exit(1)
}

// On SIGTERM/SIGINT (or an uncaught error): stop accepting, let in-flight requests and pending event
// handlers finish, then exit; past SHUTDOWN_TIMEOUT_MS the process exits anyway.
closeWithGrace({ delay: config.shutdownTimeoutMs, logger: app.log }, async ({ signal, err }) => {
  app.log.warn({ signal, err }, 'shutting down')
  await app.close()
  // The spans of the last requests and deliveries, before the process ends.
  await tracing?.shutdown()
})

try {
  await app.listen({ host: config.host, port: config.port })
} catch (error) {
  // On standard error whatever LOG_LEVEL says: a service that cannot start must always say why, and which of its
  // servers it was (the operations API's says so itself).
  console.error(error instanceof ListenError ? error.message : `Cannot listen on ${config.host}:${config.port}: ${(error as Error).message}`)
  await app.close()
  process.exit(1)
}
