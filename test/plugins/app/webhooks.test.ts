// Webhooks through HTTP: the service's item routes on one side, a real receiver on a local port on the other.
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { Ajv2020 } from 'ajv/dist/2020.js'
import ajvFormats from 'ajv-formats'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import { parse } from 'yaml'
import { schemas } from '../../../generated/schemas.js'
import { type ReceivedWebhook, type Receiver, startReceiver } from '../../../harness/webhook-receiver.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { type Api } from '../../support/api.js'
import { build, captureLogs } from '../../support/app.js'
import { ownRedis, redisKeyPrefix, redisSkip } from '../../support/redis.js'

const SECRET = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
const MISSING_ID = '00000000-0000-4000-8000-000000000000'

// The schema the contract declares for each webhook's body, by channel.
const ajv = new Ajv2020({ strict: false, allErrors: true })
ajvFormats.default(ajv)
for (const schema of Object.values(schemas)) ajv.addSchema(schema)
const { webhooks } = parse(readFileSync('openapi.yaml', 'utf8')) as { webhooks: Record<string, { post: { requestBody: { content: Record<string, { schema: { $ref: string } }> } } }> }
function assertMatchesWebhookSchema (t: Test, body: unknown): void {
  const channel = String((body as { type?: unknown }).type)
  const reference = webhooks[channel]?.post.requestBody.content['application/cloudevents+json']?.schema.$ref ?? ''
  const validate = ajv.getSchema(reference.replace('#/components/schemas/', ''))
  t.ok(validate?.(body), `the ${channel} body matches the contract: ${ajv.errorsText(validate?.errors)}`)
}

async function receiver (t: Test): Promise<Receiver> {
  const started = await startReceiver()
  t.teardown(started.stop)
  return started
}

const subscription = (target: Receiver, channels?: string[]): object => ({ url: target.url, secret: SECRET, ...(channels === undefined ? {} : { channels }) })

/** The app, with WEBHOOKS set to `subscriptions` and quick retries unless `env` says otherwise. */
async function buildWith (t: Test, subscriptions: object[], env: NodeJS.ProcessEnv = {}, logStream?: ReturnType<typeof captureLogs>['logStream']): Promise<Api> {
  return await build(t, { WEBHOOKS: JSON.stringify(subscriptions), WEBHOOK_RETRY_DELAYS_MS: '50,50', ...env }, logStream === undefined ? {} : { logStream })
}

const verified = (received: ReceivedWebhook): unknown =>
  new Webhook(SECRET).verify(received.body, Object.fromEntries(Object.entries(received.headers).map(([name, value]) => [name, String(value)])))

t.test('each successful create, edit and delete is POSTed once, signed, as the contract\'s CloudEvent; a failed request sends nothing', async (t) => {
  const target = await receiver(t)
  const api = await buildWith(t, [subscription(target)])
  const owner = await api.register()
  const other = await api.register({ role: 'contributor' })
  const item = await api.createItem(owner.accessToken, { name: 'announced', description: 'ü€𝄞' })
  const edited = (await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { status: 'archived' } })).json()
  const failures = [
    await api.call('updateItem', { token: other.accessToken, params: { itemId: item.id }, body: { name: 'x' } }),
    await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: '' } }),
    await api.call('createItem', { token: owner.accessToken, body: {} }),
    await api.call('deleteItem', { token: other.accessToken, params: { itemId: item.id } }),
    await api.call('deleteItem', { token: owner.accessToken, params: { itemId: MISSING_ID } })
  ]
  t.same(failures.map((response) => response.statusCode), [403, 400, 400, 403, 404])
  t.equal((await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })).statusCode, 204)

  const received = await target.waitFor(3)
  await sleep(300)
  t.equal(target.received.length, 3, 'nothing more')
  const events = received.map((one) => verified(one) as { id: string, type: string, data: unknown })
  t.same(events.map((event) => event.type), ['items.item.added', 'items.item.edited', 'items.item.removed'])
  t.same(events.map((event) => event.data), [{ item, actorId: owner.user.id }, { item: edited, actorId: owner.user.id }, { item: edited, actorId: owner.user.id }])
  for (const [index, one] of received.entries()) {
    t.equal(one.headers['content-type'], 'application/cloudevents+json')
    t.equal(one.headers['webhook-id'], events[index]?.id, 'webhook-id is the event id')
    t.match(one.headers['webhook-signature'], /^v1,[A-Za-z0-9+/=]+$/)
    t.ok(Math.abs(Number(one.headers['webhook-timestamp']) - Date.now() / 1000) < 10, 'webhook-timestamp is now, in seconds')
    assertMatchesWebhookSchema(t, events[index])
  }
  t.throws(() => new Webhook(`whsec_${Buffer.from('another secret, just as long as it').toString('base64')}`)
    .verify(received[0]!.body, Object.fromEntries(Object.entries(received[0]!.headers).map(([name, value]) => [name, String(value)]))),
  'another secret does not verify it')
})

t.test('a subscriber limited to one channel gets only that channel; the others get every channel', async (t) => {
  const edits = await receiver(t)
  const everything = await receiver(t)
  const api = await buildWith(t, [subscription(edits, ['items.item.edited']), subscription(everything)])
  const owner = await api.register()
  const item = await api.createItem(owner.accessToken)
  await api.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: 'renamed' } })
  await api.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })
  await everything.waitFor(3)
  await sleep(200)
  t.same(edits.received.map((one) => JSON.parse(one.body).type), ['items.item.edited'])
})

t.test('a closed app leaves no timer running: the process that closed it can end at once', async (t) => {
  const target = await receiver(t)
  // Timers that keep the process alive (tap's own, for this test, among them), before the app exists.
  const runningTimers = (): number => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length
  const before = runningTimers()
  const api = await buildWith(t, [subscription(target)])
  const owner = await api.register()
  await api.createItem(owner.accessToken)
  await target.waitFor(1)
  await api.app.close()
  // At most as many: a timer running before the app was built (an earlier test's) may have ended since.
  t.ok(runningTimers() <= before, 'no timer of the app outlives its close')
})

t.test('a receiver that answers 500 once gets the event on the next attempt, with the same webhook-id', async (t) => {
  const target = await receiver(t)
  target.answer(500)
  const { lines, logStream } = captureLogs()
  const api = await buildWith(t, [subscription(target)], { LOG_LEVEL: 'info' }, logStream)
  const owner = await api.register()
  await api.createItem(owner.accessToken)
  const [failed, delivered] = await target.waitFor(2)
  t.equal(failed?.headers['webhook-id'], delivered?.headers['webhook-id'])
  t.equal(failed?.body, delivered?.body)
  t.not(failed?.headers['webhook-signature'], undefined)
  await sleep(100)
  t.equal(target.received.length, 2, 'a 2xx ends the delivery')
  const logged = lines.map((line) => JSON.parse(line) as { msg: string, level: number, attempt?: number, reason?: string, retried?: number, delivered?: number })
  t.match(logged.find((line) => line.msg.startsWith('webhook attempt failed')), { level: 40, attempt: 1, reason: 'answered 500', retried: 1 })
  t.match(logged.find((line) => line.msg === 'webhook delivered'), { level: 30, attempt: 2, delivered: 1, retried: 1 })
  t.notMatch(lines.join(''), SECRET.slice(6), 'the secret is never logged')
})

t.test('a receiver that is down, then back, gets the event', async (t) => {
  const target = await receiver(t)
  await target.stop()
  const api = await buildWith(t, [subscription(target)], { WEBHOOK_RETRY_DELAYS_MS: '200,200,200' })
  const owner = await api.register()
  const item = await api.createItem(owner.accessToken)
  await sleep(100)
  await target.start()
  const [delivered] = await target.waitFor(1)
  t.equal(JSON.parse(delivered?.body ?? '{}').subject, item.id)
})

t.test('an attempt the receiver never answers times out and is retried; the response to the client never waited for it', async (t) => {
  const slow = await receiver(t)
  const quick = await receiver(t)
  slow.answer('hang')
  const api = await buildWith(t, [subscription(slow), subscription(quick)], { WEBHOOK_TIMEOUT_MS: '300', WEBHOOK_RECLAIM_AFTER_MS: '1000' })
  const owner = await api.register()
  const response = await api.call('createItem', { token: owner.accessToken, body: { name: 'n' } })
  t.equal(response.statusCode, 201)
  await quick.waitFor(1)
  t.equal(slow.received.length <= 1, true, 'the other subscriber was not held up by the hanging one')
  const [hung, retried] = await slow.waitFor(2)
  t.equal(hung?.headers['webhook-id'], retried?.headers['webhook-id'])
})

t.test('after its last attempt a delivery is dead-lettered and logged at error level with its id and subscriber', async (t) => {
  const target = await receiver(t)
  target.answer(500, 503, 404)
  const { lines, logStream } = captureLogs()
  const api = await buildWith(t, [subscription(target)], { LOG_LEVEL: 'warn', WEBHOOK_RETRY_DELAYS_MS: '20,20' }, logStream)
  const owner = await api.register()
  await api.createItem(owner.accessToken)
  const attempts = await target.waitFor(3)
  await sleep(200)
  t.equal(target.received.length, 3, 'one attempt more than there are delays, then no more')
  const deadLettered = lines.map((line) => JSON.parse(line)).find((line) => line.msg.startsWith('webhook dead-lettered'))
  t.match(deadLettered, { level: 50, eventId: attempts[0]?.headers['webhook-id'], subscriber: target.url, attempt: 3, reason: 'answered 404', deadLettered: 1, retried: 2 })
})

t.test('a subscriber has at most 32 attempts in progress; the others wait their turn, and every one is delivered', async (t) => {
  const target = await receiver(t)
  target.answer(...Array.from({ length: 36 }, () => 'hang' as const))
  const api = await buildWith(t, [subscription(target)], { WEBHOOK_TIMEOUT_MS: '1000', WEBHOOK_RECLAIM_AFTER_MS: '2000' })
  const owner = await api.register()
  const created = await Promise.all(Array.from({ length: 36 }, async (_, index) => (await api.createItem(owner.accessToken, { name: `item ${index}` })).id))
  await target.waitFor(32)
  await sleep(300)
  t.equal(target.received.length, 32, '32 attempts hang, the other four wait')
  const received = await target.waitFor(72)
  const delivered = new Set(received.slice(36).map((one) => JSON.parse(one.body).subject))
  t.same([...delivered].sort(), created.slice().sort(), 'after the timeouts, every event is delivered')
})

t.test('a receiver that answers 200 then trickles its body neither holds an attempt past its deadline nor delays another subscriber on its origin', async (t) => {
  // One origin, two subscribers: /slow sends its headers, then a byte every 100 ms of a body it never finishes.
  const requests = { slow: new Set<string>(), fast: new Set<string>(), slowTotal: 0 }
  const server = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      const id = String(request.headers['webhook-id'])
      if (request.url === '/fast') {
        requests.fast.add(id)
        response.writeHead(204).end()
        return
      }
      requests.slow.add(id)
      requests.slowTotal += 1
      response.writeHead(200, { 'content-length': '1000' })
      const trickle = setInterval(() => response.write('x'), 100)
      response.on('close', () => { clearInterval(trickle) })
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const api = await buildWith(t, [{ url: `${origin}/slow`, secret: SECRET }, { url: `${origin}/fast`, secret: SECRET }],
    // A deadline a busy machine's event loop does not outlast between a request and its status line; the body
    // trickles on for 100 s, so an attempt that waited for it would still end at the deadline and be sent again.
    { WEBHOOK_TIMEOUT_MS: '4000', RATE_LIMIT_WRITES: '1000' })
  const { accessToken } = await api.register()
  for (let index = 0; index < 40; index += 1) await api.createItem(accessToken, { name: `item ${index}` })
  const began = Date.now()
  while (requests.fast.size < 40 && Date.now() - began < 10_000) await sleep(20)
  t.equal(requests.fast.size, 40, `the other subscriber got every event, in ${Date.now() - began} ms`)
  t.ok(Date.now() - began < 4000, 'without waiting for the trickling one (its attempts\' deadline)')
  while (requests.slow.size < 40 && Date.now() - began < 10_000) await sleep(20)
  // Past the deadline: an attempt it had ended would have been sent again by now.
  await sleep(4500)
  t.equal(requests.slow.size, 40, 'the trickling subscriber got every event too')
  t.equal(requests.slowTotal, 40, 'each once: its 200 settled each attempt, and no lease ended under one')
})

t.test('past its bound, new events are dropped for a subscriber, counted and logged; those waiting keep their place', async (t) => {
  const target = await receiver(t)
  target.answer('hang', 'hang')
  const { lines, logStream } = captureLogs()
  const store = createMemoryStore({ pendingDeliveries: { deliveries: 2, deliveryBytes: 1024 * 1024 } })
  const api = await build(t, { WEBHOOKS: JSON.stringify([subscription(target)]), WEBHOOK_TIMEOUT_MS: '500', WEBHOOK_RETRY_DELAYS_MS: '50', LOG_LEVEL: 'warn' }, { store, logStream })
  const owner = await api.register()
  const kept = [await api.createItem(owner.accessToken, { name: 'first' }), await api.createItem(owner.accessToken, { name: 'second' })]
  await target.waitFor(2)
  await api.createItem(owner.accessToken, { name: 'dropped' })
  const received = await target.waitFor(4)
  t.same(received.slice(2).map((one) => JSON.parse(one.body).subject).sort(), kept.map((item) => item.id).sort())
  await sleep(200)
  t.equal(target.received.length, 4, 'the dropped event is never sent')
  t.match(lines.map((line) => JSON.parse(line)).find((line) => line.msg.startsWith('webhook deliveries dropped')), { level: 50, dropped: 1, deadLettered: 1, subscriber: target.url })
})

t.test('with Redis down, taking and settling deliveries fail (logged once), and delivery resumes when it is back', { skip: await redisSkip() }, async (t) => {
  const redis = await ownRedis(t)
  const target = await receiver(t)
  target.answer('hang')
  const { lines, logStream } = captureLogs()
  const api = await build(t, {
    STORE: 'redis',
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: redisKeyPrefix(t),
    WEBHOOKS: JSON.stringify([subscription(target)]),
    WEBHOOK_TIMEOUT_MS: '500',
    WEBHOOK_RECLAIM_AFTER_MS: '1000',
    WEBHOOK_RETRY_DELAYS_MS: '50,50,50,50',
    LOG_LEVEL: 'info'
  }, { logStream })
  const owner = await api.register()
  await api.createItem(owner.accessToken)
  await target.waitFor(1)
  await redis.stop()
  // The hanging attempt times out while Redis is down, and polls fail, again and again.
  await sleep(1200)
  await redis.start()
  while ((await api.call('checkReadiness')).statusCode !== 200) await sleep(50)
  const owner2 = await api.register()
  const item = await api.createItem(owner2.accessToken, { name: 'after the outage' })
  const received = await target.waitFor(2)
  t.equal(JSON.parse(received.at(-1)?.body ?? '{}').subject, item.id, 'delivered once Redis is back (the restarted Redis kept nothing)')
  const messages = lines.map((line) => JSON.parse(line).msg as string)
  t.equal(messages.filter((message) => message.startsWith('cannot take webhook deliveries')).length, 1, 'the outage is logged once')
  t.ok(messages.includes('cannot record a webhook attempt in the store; the delivery will be taken again'))
  t.ok(messages.includes('webhook deliveries are taken from the store again'))
})
