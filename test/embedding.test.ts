// Embedding: another project builds the service with a few typed settings, or registers it as a plugin
// (test/production.release.test.ts installs the packed package into another project).
import t from 'tap'
import { buildApp } from '../src/app/app.js'
import { type AppSettings, loadConfig } from '../src/config/config.js'
import { itemsService } from '../src/app/service.js'
import { captureLogs, testEnvironment } from './support/app.js'

t.test('buildApp takes any part of the configuration; the rest keeps its default', async (t) => {
  const { lines, logStream } = captureLogs()
  const settings: AppSettings = {
    logLevel: 'warn',
    rateLimits: null,
    store: { maxItemsPerUser: 5 },
    // @ts-expect-error A misspelt setting does not compile (npm test type-checks the tests).
    logLevl: 'silent'
  }
  const app = await buildApp(settings, { logStream })
  t.teardown(async () => { await app.close() })
  t.equal((await app.inject({ method: 'GET', url: '/health/ready' })).statusCode, 200)
  t.match(lines.join(''), /JWT_SECRET is not set/, 'a random secret, as by default')
  const quiet = captureLogs()
  const withSecret = await buildApp({ logLevel: 'warn', jwt: { secret: 's'.repeat(32) } }, { logStream: quiet.logStream })
  await withSecret.close()
  t.same(quiet.lines, [], 'a secret given is not a generated one')
})

t.test('the service is also a plugin: a host server registers it beside its own routes, which keep their own handling', async (t) => {
  const { default: Fastify } = await import('fastify')
  const host = Fastify({ logger: false })
  t.teardown(async () => { await host.close() })
  host.get('/host/status', async () => ({ host: 'up' }))
  host.post('/host/echo', { schema: { body: { type: 'object', properties: { n: { type: 'integer' } } } } }, async (request) => request.body)
  await host.register(itemsService, { config: loadConfig({ ...testEnvironment(), STORE: 'memory' }) })
  t.same((await host.inject({ method: 'GET', url: '/host/status' })).json(), { host: 'up' })
  t.same((await host.inject({ method: 'POST', url: '/host/echo', payload: { n: '7' } })).json(), { n: 7 }, 'the host\'s own validator (it coerces)')
  t.equal((await host.inject({ method: 'GET', url: '/health/ready' })).statusCode, 200, 'the service\'s routes')
  const unauthorised = await host.inject({ method: 'GET', url: '/v1/items' })
  t.equal(unauthorised.statusCode, 401)
  t.equal(unauthorised.json().code, 'AUTHENTICATION_REQUIRED', 'in the contract\'s shape')
  const invalid = await host.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'a@b.co', password: 7 } })
  t.same(invalid.json().details, [{ field: 'body.password', issue: 'must be string' }], 'the generated validators, which coerce nothing in a body')
})
