import { getHeapStatistics } from 'node:v8'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { build, buildTestApp } from '../support/app.js'
import { whileEventLoopOverloaded } from '../support/wait.js'

t.test('liveness and readiness answer ok while the service runs', async (t) => {
  const api = await build(t)
  for (const url of ['/health/live', '/health/ready']) {
    const response = await api.inject({ method: 'GET', url })
    t.equal(response.statusCode, 200)
    t.same(response.json(), { status: 'ok' })
  }
})

t.test('closing the app starts draining', async (t) => {
  const api = await build(t)
  t.equal(api.app.lifecycle.draining, false)
  await api.app.close()
  t.equal(api.app.lifecycle.draining, true)
})

t.test('a draining service is alive but not ready', async (t) => {
  const api = await build(t)
  api.app.lifecycle.draining = true
  const ready = await api.inject({ method: 'GET', url: '/health/ready' })
  t.equal(ready.statusCode, 503)
  t.same(ready.json(), { code: 'SERVICE_UNAVAILABLE', message: 'The service is shutting down.' })
  t.equal((await api.inject({ method: 'GET', url: '/health/live' })).statusCode, 200)
})

t.test('an overloaded service sheds requests with 503 and Retry-After', async (t) => {
  const api = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  const response = await whileEventLoopOverloaded(api.app, 20, async () => await api.inject({ method: 'GET', url: '/health/ready' }))
  t.equal(response.statusCode, 503)
  t.equal(response.json().code, 'SERVICE_UNAVAILABLE')
  t.equal(response.headers['retry-after'], '5')
})

t.test('an overload that outlasts a sample of the event loop is shed throughout', async (t) => {
  const api = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  const statuses = await whileEventLoopOverloaded(api.app, 20, async () => {
    const answered = []
    // Past the next two samples (one each 250 ms), each of which must read the loop as still lagging.
    for (let request = 0; request < 4; request++) {
      answered.push((await api.inject({ method: 'GET', url: '/health/ready' })).statusCode)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    return answered
  })
  t.same(statuses, [503, 503, 503, 503])
})

t.test('a fresh instance serves its first requests, however long its start kept the event loop busy', async (t) => {
  const app = await buildTestApp(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  // A start that holds the event loop for several samples (a large contract's schemas, on a machine busy with
  // other work): what it delays is no request.
  await app.register(async () => {
    const busyUntil = Date.now() + 600
    while (Date.now() < busyUntil) { /* busy */ }
  })
  await app.ready()
  // The timers that fell due while it was busy (the load samples) run first.
  await new Promise((resolve) => setTimeout(resolve, 1))
  t.equal((await app.inject({ method: 'GET', url: '/health/ready' })).statusCode, 200)
})

t.test('a malformed URL is a 400 in the contract\'s shape, never Fastify\'s own', async (t) => {
  const api = await build(t)
  const response = await api.inject({ method: 'GET', url: '/v1/items/%E0%A4%A' })
  t.equal(response.statusCode, 400)
  t.same(response.json().details, [{ field: 'url', issue: 'is not a valid URL' }])
})

t.test('past MAX_HEAP_USED_MIB, every request but a GET is shed with 503 and Retry-After; reads go on', async (t) => {
  const api = await build(t, { MAX_HEAP_USED_MIB: '1024' })
  const { accessToken } = await api.register()
  const actual = process.memoryUsage()
  t.capture(process, 'memoryUsage', () => ({ ...actual, heapUsed: getHeapStatistics().heap_size_limit }))
  while (api.app.memoryUsage().heapUsed < getHeapStatistics().heap_size_limit) await sleep(20)
  const write = await api.call('createItem', { token: accessToken, body: { name: 'x' } })
  t.equal(write.statusCode, 503)
  t.same(write.json(), { code: 'SERVICE_UNAVAILABLE', message: 'The service is short of memory; try again later.' })
  t.equal(write.headers['retry-after'], '5')
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200)
})

t.test('what frees memory or ends access is never shed: past MAX_HEAP_USED_MIB, item deletes and logout are served', async (t) => {
  const api = await build(t, { MAX_HEAP_USED_MIB: '1024' })
  const { accessToken } = await api.register()
  const item = await api.createItem(accessToken)
  const actual = process.memoryUsage()
  t.capture(process, 'memoryUsage', () => ({ ...actual, heapUsed: getHeapStatistics().heap_size_limit }))
  while (api.app.memoryUsage().heapUsed < getHeapStatistics().heap_size_limit) await sleep(20)
  t.equal((await api.call('updateItem', { token: accessToken, params: { itemId: item.id }, body: { name: 'y' } })).statusCode, 503, 'an edit is shed')
  t.equal((await api.call('deleteItem', { token: accessToken, params: { itemId: item.id } })).statusCode, 204)
  t.equal((await api.call('logoutUser', { token: accessToken })).statusCode, 204)
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 401, 'the session has ended')
})
