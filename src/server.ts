import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { ConfigError, loadConfig } from './config.js'

let config
try {
  config = loadConfig()
} catch (error) {
  if (!(error instanceof ConfigError)) throw error
  console.error(error.message)
  process.exit(1)
}

const app = await buildApp(config)

// On SIGTERM/SIGINT: stop accepting, let in-flight requests and pending event handlers finish, then exit.
closeWithGrace({ delay: config.shutdownTimeoutMs }, async ({ signal, err }) => {
  if (err !== undefined) app.log.error({ err }, 'shutting down after an uncaught error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

await app.listen({ host: config.host, port: config.port })
