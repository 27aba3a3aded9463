// First: app.ts pins a tick object before any other module loads (src/tick-object-pin.ts).
import { buildApp } from './app.js'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { type AppConfig, loadConfig } from './config.js'

let config: AppConfig
try {
  config = loadConfig()
} catch (error) {
  console.error((error as Error).message)
  process.exit(1)
}

let app: FastifyInstance
try {
  app = await buildApp(config)
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
})

try {
  await app.listen({ host: config.host, port: config.port })
} catch (error) {
  // On standard error whatever LOG_LEVEL says: a service that cannot start must always say why.
  console.error(`Cannot listen on ${config.host}:${config.port}: ${(error as Error).message}`)
  await app.close()
  process.exit(1)
}
