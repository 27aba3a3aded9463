import t from 'tap'
import { loadConfig } from '../src/config.js'
import { build, captureLogs } from './helper.js'

t.test('defaults make a working development configuration', async (t) => {
  const config = loadConfig({})
  t.match(config, {
    environment: 'development',
    host: '127.0.0.1',
    port: 3000,
    logLevel: 'info',
    jwt: { secretGenerated: true, accessTokenTtlSeconds: 900 },
    refreshTokenTtlSeconds: 604800,
    bodyLimit: 65536,
    rateLimits: { login: { max: 10, windowSeconds: 60 } }
  })
  t.ok(Buffer.byteLength(config.jwt.secret) >= 32, 'a generated secret is at least 32 bytes')
  t.not(loadConfig({}).jwt.secret, config.jwt.secret, 'and random')
})

t.test('a bad value stops the start with a message naming the variable', async (t) => {
  const bad: Record<string, string> = {
    PORT: 'eighty',
    HOST: '',
    BODY_LIMIT: '1e3',
    SHUTDOWN_TIMEOUT: ' ',
    ACCESS_TOKEN_TTL: '0',
    JWT_SECRET: 'too short',
    RATE_LIMIT: 'maybe',
    LOG_LEVEL: 'loud'
  }
  for (const [name, value] of Object.entries(bad)) {
    t.throws(() => loadConfig({ [name]: value }), { name: 'ConfigError', message: new RegExp(`^Invalid configuration: ${name} must `) }, `${name}=${value}`)
  }
})

t.test('production refuses to start without JWT_SECRET', async (t) => {
  t.throws(() => loadConfig({ NODE_ENV: 'production' }), { message: /JWT_SECRET is required/ })
  t.equal(loadConfig({ NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32) }).jwt.secretGenerated, false)
})

t.test('RATE_LIMIT=off switches every limit off', async (t) => {
  t.equal(loadConfig({ RATE_LIMIT: 'off' }).rateLimits, null)
})

t.test('a generated secret is announced with a warning at startup', async (t) => {
  const { lines, logStream } = captureLogs()
  await build(t, { JWT_SECRET: undefined, LOG_LEVEL: 'warn' }, { logStream })
  t.match(lines.join(''), /JWT_SECRET is not set/)
})
