// Traces, sent over OTLP/HTTP to a collector's receiver in the test (both encodings), from a real server on Redis
// with a webhook subscriber: one trace from the caller's traceparent through the request, its Redis commands and
// the webhook attempt, whose traceparent names that trace.
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import t from 'tap'
import { newUser, type Schemas } from '../support/api.js'
import { buildTestApp } from '../support/app.js'
import { type Collector, startCollector } from '../support/otlp-collector.js'
import { failedStart, type Server, start } from '../support/processes.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'
import { type Receiver, startReceiver } from '../../harness/webhook-receiver.js'

const SECRET = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
const SERVER = 2
const CLIENT = 3

async function post<Body> (server: Server, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number, headers: Headers, body: Body }> {
  const response = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  return { status: response.status, headers: response.headers, body: await response.json() as Body }
}

const logLines = (server: Server): Array<Record<string, unknown>> =>
  server.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>)

t.test('with tracing unset, none of it is loaded', async (t) => {
  const app = await buildTestApp(t)
  t.equal((await app.inject({ method: 'GET', url: '/health/live' })).statusCode, 200)
  const loaded = Object.keys(createRequire(import.meta.url).cache)
  // prom-client loads @opentelemetry/api for its exemplars; the SDK, exporters and instrumentations are tracing's own.
  t.same(loaded.filter((path) => /@fastify[/\\]otel|@opentelemetry[/\\](?!api[/\\])|import-in-the-middle/.test(path)), [])
  t.equal(app.hasPlugin('request-spans'), false)
})

t.test('an OTLP protocol the service does not offer stops the start, in one line', async (t) => {
  const { code, stderr } = await failedStart({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })
  t.equal(code, 1)
  t.match(stderr, /OTEL_EXPORTER_OTLP_PROTOCOL/)
})

for (const protocol of ['http/protobuf', 'http/json'] as const) {
  t.test(`${protocol}: one trace from the caller's traceparent through the request, its Redis commands and the webhook attempt`, { skip: await redisSkip() }, async (t) => {
    const collector: Collector = await startCollector()
    t.teardown(collector.stop)
    const receiver: Receiver = await startReceiver()
    t.teardown(receiver.stop)
    const another: Receiver = await startReceiver()
    t.teardown(another.stop)
    const server = await start({
      STORE: 'redis',
      REDIS_KEY_PREFIX: redisKeyPrefix(t),
      WEBHOOKS: JSON.stringify([{ url: `${receiver.url}?token=a-query-secret`, secret: SECRET }, { url: another.url, secret: SECRET }]),
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
      OTEL_SERVICE_NAME: 'items-under-test',
      // Nothing is exported before the shutdown, which must send every span.
      OTEL_BSP_SCHEDULE_DELAY: '600000'
    })
    t.teardown(() => { server.process.kill('SIGKILL') })

    const registered = await post<Schemas['AuthResponse']>(server, '/v1/auth/register', newUser())
    t.equal(registered.status, 201)
    const traceId = randomBytes(16).toString('hex')
    const callerSpanId = randomBytes(8).toString('hex')
    const created = await post<Schemas['Item']>(server, '/v1/items', { name: 'traced' }, {
      authorization: `Bearer ${registered.body.accessToken}`,
      traceparent: `00-${traceId}-${callerSpanId}-01`
    })
    t.equal(created.status, 201)

    t.equal((await fetch(`${server.url}/v1/nowhere`)).status, 404)
    const [webhook] = await receiver.waitFor(1)
    const [anotherWebhook] = await another.waitFor(1)
    const webhookTraceparent = new RegExp(`^00-${traceId}-([0-9a-f]{16})-01$`).exec(String(webhook?.headers.traceparent))
    t.ok(webhookTraceparent, 'the webhook request carries a traceparent in the caller\'s trace')

    const exited = once(server.process, 'exit')
    server.process.kill('SIGTERM')
    t.same(await exited, [0, null], 'a clean exit')
    const spans = collector.spans.filter((span) => span.traceId === traceId)
    const request = spans.find((span) => span.kind === SERVER)
    t.match(request, {
      serviceName: 'items-under-test',
      parentSpanId: callerSpanId,
      name: 'POST /v1/items',
      attributes: { 'openapi.operation_id': 'createItem', 'http.route': '/v1/items', 'http.response.status_code': 201 }
    }, 'the request span continues the caller\'s trace, named by its route')
    const redisCommands = spans.filter((span) => span.attributes['db.system.name'] === 'redis')
    t.ok(redisCommands.length > 0, 'the request\'s Redis commands are spans of its trace')
    t.ok(redisCommands.every((span) => span.parentSpanId === request?.spanId && span.kind === CLIENT), 'children of the request span')
    t.notOk(redisCommands.some((span) => /\s/.test(String(span.attributes['db.query.text']))), 'only the command is named, not its arguments')
    const attempts = spans.filter((span) => span.kind === CLIENT && span.name === 'POST')
    const attempt = attempts.find((span) => span.spanId === webhookTraceparent?.[1])
    t.match(attempt, { parentSpanId: request?.spanId, attributes: { 'http.response.status_code': 204, 'url.full': receiver.url, 'url.query': 'REDACTED' } },
      'the webhook attempt is a child of the request that caused its event, and its traceparent names it')
    t.notOk(JSON.stringify(attempt).includes('a-query-secret'), 'a secret in the subscriber\'s query stays out of the span')
    t.match(attempts.find((span) => anotherWebhook?.headers.traceparent === `00-${traceId}-${span.spanId}-01`),
      { parentSpanId: request?.spanId, attributes: { 'url.full': another.url, 'url.query': '' } }, 'each subscriber\'s attempt, in the same trace')

    t.match(collector.spans.find((span) => span.kind === SERVER && span.attributes['url.path'] === '/v1/nowhere'),
      { name: 'GET', attributes: { 'http.response.status_code': 404 } }, 'a request no route serves is named by its method alone')
    const registration = collector.spans.find((span) => span.kind === SERVER && span.name === 'POST /v1/auth/register')
    t.equal(registration?.parentSpanId, '', 'a request without a traceparent starts a trace of its own')
    t.ok(collector.contentTypes.has(protocol === 'http/json' ? 'application/json' : 'application/x-protobuf'))

    const requestId = created.headers.get('x-request-id')
    // From the request's first hook on: Fastify logs "incoming request" before any hook runs.
    const requestLines = logLines(server).filter((line) => line.reqId === requestId && line.msg !== 'incoming request')
    t.ok(requestLines.length > 0)
    t.ok(requestLines.every((line) => line.trace_id === traceId && line.span_id === request?.spanId), 'the request\'s log lines carry its trace and span ids')
    const deliveredLines = logLines(server).filter((line) => line.msg === 'webhook delivered')
    t.same(deliveredLines.map((line) => line.trace_id), [traceId, traceId], 'and so do its deliveries\'')
  })
}
