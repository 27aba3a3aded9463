import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { get } from 'node:http'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { parse } from 'yaml'
import { build, buildTestApp, captureLogs } from '../support/app.js'
import { contractOperations } from '../support/contract-checks.js'
import { freePort } from '../../harness/net.js'
import { INTERNAL_ERROR_BODY } from '../../src/errors.js'

t.test('every operation openapi.yaml declares is routed', async (t) => {
  const api = await build(t)
  for (const { operationId, method, path } of contractOperations()) {
    t.ok(api.app.hasRoute({ method, url: path.replace(/\{(\w+)\}/g, ':$1') }), `${operationId}: ${method} ${path}`)
  }
})

t.test('an unknown route is a 404 NOT_FOUND in the ErrorResponse shape', async (t) => {
  const api = await build(t)
  const response = await api.inject({ method: 'GET', url: '/v1/nothing-here?x=1' })
  t.equal(response.statusCode, 404)
  t.same(response.json(), { code: 'NOT_FOUND', message: 'Route GET /v1/nothing-here not found.' })
})

t.test('every response carries a request id, and a caller-supplied one is echoed', async (t) => {
  const api = await build(t)
  const generated = await api.inject({ method: 'GET', url: '/v1/items' })
  t.match(generated.headers['x-request-id'], /^[0-9a-f-]{36}$/)
  const echoed = await api.inject({ method: 'GET', url: '/v1/items', headers: { 'x-request-id': 'trace-42' } })
  t.equal(echoed.headers['x-request-id'], 'trace-42')
})

t.test('a caller\'s request id is kept only when it is short and of a safe alphabet', async (t) => {
  const { lines, logStream } = captureLogs()
  const api = await build(t, { LOG_LEVEL: 'info' }, { logStream })
  const kept = 'A-z_0.9:trace/42'
  t.equal((await api.inject({ method: 'GET', url: '/health/live', headers: { 'x-request-id': kept } })).headers['x-request-id'], kept)
  for (const hostile of ['x'.repeat(129), '{"level":60,"msg":"forged"}', 'a b', '\u00e9t\u00e9', '"quoted"']) {
    const response = await api.inject({ method: 'GET', url: '/health/live', headers: { 'x-request-id': hostile } })
    t.match(response.headers['x-request-id'], /^[0-9a-f-]{36}$/, `replaced: ${hostile.slice(0, 20)}`)
  }
  t.notOk(lines.some((line) => line.includes('forged')), 'the hostile id reaches no log line')
})

t.test('numbers that are not finite, or not written in decimal digits, in any parameter, are a 400 VALIDATION_ERROR, never a 500', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  // Each a number to JavaScript's Number(), and so to Ajv's coercion: hex, binary, an exponent, padding, a
  // fraction of an integer.
  const notDecimal = ['0x10', '0b1', '0o7', '1e2', ' 1', '1 ', '\t2', '1.0', '.5']
  for (const hostile of ['Infinity', '-Infinity', 'NaN', '1e400', '1e309', '-1e309', '9'.repeat(5000), ...notDecimal]) {
    for (const name of ['page', 'pageSize']) {
      const response = await api.call('listItems', { token: accessToken, query: { [name]: hostile } })
      t.equal(response.statusCode, 400, `${name}=${JSON.stringify(hostile.slice(0, 12))}`)
      t.match(response.json().details, [{ field: name, issue: /must be (integer|a finite number|a number written in decimal digits)/ }])
    }
  }
  t.equal((await api.call('listItems', { token: accessToken, query: { page: '2', pageSize: '007' } })).statusCode, 200, 'decimal digits, leading zeros and all, are a number')
})

// Writes raw bytes to a listening app and reads what comes back until the server closes the connection.
async function rawExchange (address: string, request: string): Promise<string> {
  const { hostname, port } = new URL(address)
  const socket = connect(Number(port), hostname)
  let received = ''
  socket.on('data', (chunk: Buffer) => { received += String(chunk) })
  socket.on('error', () => { /* the server resets after answering */ })
  socket.write(request)
  await once(socket, 'close')
  return received
}

t.test('a request that Node\'s HTTP parser refuses is answered in the contract\'s shapes', async (t) => {
  const api = await build(t)
  const address = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const parse = (raw: string): { status: string, body: unknown } => ({
    status: raw.slice(0, raw.indexOf('\r\n')),
    body: JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))
  })
  const oversized = parse(await rawExchange(address, `GET /v1/items HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`))
  t.equal(oversized.status, 'HTTP/1.1 431 Request Header Fields Too Large')
  t.match(oversized.body, { code: 'BAD_REQUEST', message: /headers/ })
  const garbage = parse(await rawExchange(address, 'NOT HTTP AT ALL\r\n\r\n'))
  t.equal(garbage.status, 'HTTP/1.1 400 Bad Request')
  t.same(garbage.body, { code: 'VALIDATION_ERROR', message: 'The request is invalid.', details: [{ field: 'request', issue: 'is not valid HTTP' }] })

  const { port } = new URL(address)
  const resetting = connect(Number(port), '127.0.0.1')
  await once(resetting, 'connect')
  resetting.write('GET /health/live HTTP/1.1\r\nHo')
  // Long enough for the server to be parsing the request when the reset arrives.
  await sleep(100)
  resetting.resetAndDestroy()
  await once(resetting, 'close')
  t.equal((await fetch(`${address}/health/live`)).status, 200, 'a client that resets mid-request is not answered, and the service goes on')
})

t.test('a JSON body sent to an operation that declares none is ignored, never an undeclared 400', async (t) => {
  const api = await build(t)
  const address = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const status = async (request: string): Promise<string> => {
    const raw = await rawExchange(address, request)
    return raw.slice(0, raw.indexOf('\r\n'))
  }
  const chunked = 'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\n{bad\r\n0\r\n\r\n'
  t.equal(await status(`GET /health/live HTTP/1.1\r\nHost: x\r\n${chunked}`), 'HTTP/1.1 200 OK', 'a GET')
  const { accessToken } = await api.register({ role: 'contributor' })
  const item = await api.createItem(accessToken)
  const deleted = await api.inject({ method: 'DELETE', url: `/v1/items/${item.id}`, headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json' }, payload: '{bad' })
  t.equal(deleted.statusCode, 204, 'a DELETE')
  for (const payload of ['', '{bad']) {
    const { accessToken } = await api.register()
    const loggedOut = await api.inject({ method: 'POST', url: '/v1/auth/logout', headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json' }, payload })
    t.equal(loggedOut.statusCode, 204, `a logout with ${payload === '' ? 'no body' : payload}`)
    t.equal((await api.call('listItems', { token: accessToken })).statusCode, 401, 'and its session is ended')
  }
  t.equal(await status(`POST /v1/auth/logout HTTP/1.1\r\nHost: x\r\n${chunked}`), 'HTTP/1.1 401 Unauthorized', 'authentication still comes first')
  const body = await api.inject({ method: 'POST', url: '/v1/items', headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json' }, payload: '{bad' })
  t.equal(body.statusCode, 400, 'an operation that declares a body still has it parsed')
})

t.test('a client too slow with its headers or its body gets a 408 and its connection closed, at REQUEST_TIMEOUT_MS, not Node\'s default deadlines', async (t) => {
  const api = await build(t, { REQUEST_TIMEOUT_MS: '1000' })
  const address = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const requests = {
    'stuck half-way through its headers': 'GET /health/live HTTP/1.1\r\nHost: x\r\n',
    'a body that never ends': 'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email":'
  }
  // At once: each waits out the same deadline. Node checks deadlines every second here; left at its defaults, every
  // 30 s, and a connection that sends nothing would wait for 60 s: a bound of 15 s tells them apart on a busy machine.
  const started = Date.now()
  const answers = await Promise.all([...Object.values(requests), ''].map(async (request) => {
    const raw = await rawExchange(address, request)
    return { raw, elapsed: Date.now() - started }
  }))
  for (const [index, name] of Object.keys(requests).entries()) {
    const { raw, elapsed } = answers[index]!
    t.match(raw, /^HTTP\/1\.1 408 Request Timeout\r\n/, name)
    t.match(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)), { code: 'BAD_REQUEST', message: String })
    t.ok(elapsed < 15_000, `${name}: closed after ${elapsed} ms`)
  }
  const silent = answers.at(-1)!
  t.ok(silent.elapsed < 15_000, `a connection that sends nothing: closed after ${silent.elapsed} ms`)
})

t.test('the operations port keeps the same deadlines: a client stuck in its headers there gets its 408 as on the API port', async (t) => {
  const opsPort = await freePort()
  await build(t, { REQUEST_TIMEOUT_MS: '1000', OPS_PORT: String(opsPort) })
  const started = Date.now()
  const raw = await rawExchange(`http://127.0.0.1:${opsPort}`, 'GET /metrics HTTP/1.1\r\nHost: x\r\n')
  const elapsed = Date.now() - started
  t.match(raw, /^HTTP\/1\.1 408 Request Timeout\r\n/)
  t.match(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)), { code: 'BAD_REQUEST', message: String })
  // Node checks the deadlines of the API port's connections every second; left at its default, every 30 s: as above.
  t.ok(elapsed < 15_000, `closed after ${elapsed} ms`)
})

t.test('an answer that takes longer than any of the server\'s timeouts to make still reaches its client (a sign-in queued behind slow hashing)', async (t) => {
  const app = await buildTestApp(t, { REQUEST_TIMEOUT_MS: '1000' })
  app.get('/slow-probe', async () => {
    // Past every deadline Node puts on a connection with a request in it, an inactivity timeout (server.timeout) too.
    const { timeout, requestTimeout, headersTimeout } = app.server
    await sleep(Math.max(timeout, requestTimeout, headersTimeout) + 500)
    return { answered: true }
  })
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  const response = await fetch(`${address}/slow-probe`)
  t.same([response.status, await response.json()], [200, { answered: true }])
})

t.test('an error a plugin raises with a 4xx status keeps that status, in the ErrorResponse shape', async (t) => {
  const { lines, logStream } = captureLogs()
  const api = await build(t, { LOG_LEVEL: 'error' }, { logStream })
  // Sent as-is over a socket: app.inject would normalise the dots away.
  const address = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const traversal = await new Promise<{ statusCode?: number, body: string }>((resolve, reject) => {
    get(`${address}/docs/static/../../package.json`, { path: '/docs/static/../../package.json' }, (response) => {
      let body = ''
      response.on('data', (chunk: Buffer) => { body += String(chunk) })
      response.on('end', () => { resolve({ statusCode: response.statusCode, body }) })
    }).on('error', reject)
  })
  t.equal(traversal.statusCode, 403)
  t.match(JSON.parse(traversal.body), { code: 'FORBIDDEN', message: String })
  const range = await api.app.inject({ method: 'GET', url: '/docs/static/swagger-ui.css', headers: { range: 'bytes=99999999-' } })
  t.equal(range.statusCode, 416)
  t.match(range.json(), { code: 'RANGE_NOT_SATISFIABLE', message: String })
  const precondition = await api.app.inject({ method: 'GET', url: '/docs/static/swagger-ui.css', headers: { 'if-match': '"another version"' } })
  t.equal(precondition.statusCode, 412)
  t.match(precondition.json(), { code: 'BAD_REQUEST', message: String }, 'any other 4xx keeps its status')
  t.same(lines, [], 'nothing is logged as a server error')
})

t.test('validation errors list one detail per failing field, with dotted paths', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()

  const body = await api.call('createItem', { token: accessToken, body: { name: '', description: 5, status: 'active' } })
  t.equal(body.statusCode, 400)
  t.same(body.json(), {
    code: 'VALIDATION_ERROR',
    message: 'The request is invalid.',
    details: [
      { field: 'body.status', issue: 'is not an allowed field' },
      { field: 'body.name', issue: 'must NOT have fewer than 1 characters' },
      { field: 'body.description', issue: 'must be string,null' }
    ]
  })

  const missing = await api.call('createItem', { token: accessToken, body: {} })
  t.same(missing.json().details, [{ field: 'body.name', issue: 'is required' }])

  const query = await api.call('listItems', { token: accessToken, query: { page: 0, pageSize: 'many' } })
  t.equal(query.statusCode, 400)
  t.same(query.json().details, [
    { field: 'page', issue: 'must be >= 1' },
    { field: 'pageSize', issue: 'must be integer' }
  ])

  const enumValue = await api.call('registerUser', { body: { email: 'a@example.com', password: 'password1', firstName: 'A', lastName: 'B', role: 'admin' } })
  t.same(enumValue.json().details, [{ field: 'body.role', issue: 'must be one of: contributor, viewer' }])

  const path = await api.call('getItem', { token: accessToken, params: { itemId: 'not-a-uuid' } })
  t.equal(path.statusCode, 400)
  t.same(path.json().details, [{ field: 'itemId', issue: 'must match format "uuid"' }])

  const empty = await api.call('updateItem', { token: accessToken, params: { itemId: '00000000-0000-4000-8000-000000000000' }, body: {} })
  t.same(empty.json().details, [{ field: 'body', issue: 'must contain at least one field' }])

  const array = await api.call('loginUser', { body: [] })
  t.same(array.json().details, [{ field: 'body', issue: 'must be object' }])
})

t.test('a body that is not JSON is a 400, a 415 or a 413, never a 500', async (t) => {
  const api = await build(t, { BODY_LIMIT_BYTES: '2048' })
  const login = { method: 'POST', url: '/v1/auth/login' }

  const malformed = await api.inject({ ...login, headers: { 'content-type': 'application/json' }, payload: '{"email":' })
  t.equal(malformed.statusCode, 400)
  t.match(malformed.json(), { code: 'VALIDATION_ERROR', details: [{ field: 'body', issue: /not valid JSON/ }] })

  const poisoned = await api.inject({ ...login, headers: { 'content-type': 'application/json' }, payload: '{"email":"a@example.com","password":"x","__proto__":{"admin":true}}' })
  t.equal(poisoned.statusCode, 400)
  t.match(poisoned.json(), { code: 'VALIDATION_ERROR', details: [{ field: 'body', issue: /^Body is not valid JSON/ }] }, 'refused by the parser, before validation')

  const missingBody = await api.inject({ ...login })
  t.equal(missingBody.statusCode, 400)
  t.same(missingBody.json().details, [{ field: 'body', issue: 'must be object' }])

  const text = await api.inject({ ...login, headers: { 'content-type': 'text/plain' }, payload: 'email=a' })
  t.equal(text.statusCode, 415)
  t.equal(text.json().code, 'UNSUPPORTED_MEDIA_TYPE')

  const large = await api.inject({ ...login, payload: { email: 'a@example.com', password: 'x'.repeat(4096) } })
  t.equal(large.statusCode, 413)
  t.equal(large.json().code, 'PAYLOAD_TOO_LARGE')
})

t.test('passwords and tokens are censored in log lines, at the top level and in a logged body', async (t) => {
  const { lines, logStream } = captureLogs()
  const api = await build(t, { LOG_LEVEL: 'info' }, { logStream })
  api.app.log.info({
    password: 'p1',
    accessToken: 'a1',
    body: { password: 'p2', refreshToken: 'r2', name: 'kept' }
  }, 'secrets')
  const logged: unknown = JSON.parse(lines.find((line) => line.includes('"secrets"')) ?? '{}')
  t.match(logged, {
    password: '[redacted]',
    accessToken: '[redacted]',
    body: { password: '[redacted]', refreshToken: '[redacted]', name: 'kept' }
  })
})

t.test('an unexpected failure is a 500 INTERNAL_ERROR that discloses nothing and is logged with the request id', async (t) => {
  const { lines, logStream } = captureLogs()
  const api = await build(t, { LOG_LEVEL: 'error' }, { logStream })
  // The store failing is the kind of fault no request can cause; the handler must not leak it.
  api.app.store.items.page = async () => { throw new Error('disk on fire at /var/lib/secret') }
  const { accessToken } = await api.register()
  const response = await api.call('listItems', { token: accessToken })
  t.equal(response.statusCode, 500)
  t.same(response.json(), INTERNAL_ERROR_BODY)
  t.notMatch(response.body, /disk on fire/)
  const logged = lines.map((line) => JSON.parse(line) as { reqId?: string, err?: { message: string } }).find((line) => line.err)
  t.equal(logged?.reqId, response.headers['x-request-id'])
  t.equal(logged?.err?.message, 'disk on fire at /var/lib/secret')
})

t.test('a request\'s logger writes its id on every line, its children\'s too, at the level the logger or the route sets', async (t) => {
  const { lines, logStream } = captureLogs()
  const app = await buildTestApp(t, { LOG_LEVEL: 'warn' }, { logStream })
  // Routes outside the contract, only to reach request.log as a plugin or a handler does.
  app.get('/log-probe', async (request) => {
    request.log.info('below the level')
    request.log.silent('never written')
    request.log.warn('at the level')
    request.log.child({ step: 'inner' }).error('from a child')
    request.log.level = 'info'
    request.log.info('at the level set on the request')
    return { level: request.log.level }
  })
  app.get('/log-probe/quiet', { logLevel: 'error' }, async (request) => {
    request.log.warn('below the route\'s level')
    request.log.error('at the route\'s level')
    return { level: request.log.level }
  })
  const headers = { 'x-request-id': 'probe-1' }
  t.same((await app.inject({ url: '/log-probe', headers })).json(), { level: 'info' })
  t.same((await app.inject({ url: '/log-probe/quiet', headers })).json(), { level: 'error' })
  const written = lines.map((line) => JSON.parse(line) as { reqId?: string, msg: string, step?: string })
  t.same(written.map(({ reqId, msg, step }) => ({ reqId, msg, step })), [
    { reqId: 'probe-1', msg: 'at the level', step: undefined },
    { reqId: 'probe-1', msg: 'from a child', step: 'inner' },
    { reqId: 'probe-1', msg: 'at the level set on the request', step: undefined },
    { reqId: 'probe-1', msg: 'request completed', step: undefined },
    { reqId: 'probe-1', msg: 'at the route\'s level', step: undefined }
  ])
})

t.test('with SANDBOXES=on the served contract names a sandbox of the instance as its second server, as the contract does', async (t) => {
  const api = await build(t, { SANDBOXES: 'on', OPS_PORT: String(await freePort()) })
  const { servers } = parse(readFileSync('openapi.yaml', 'utf8')) as { servers: Array<{ variables?: unknown }> }
  t.same((await api.app.inject({ method: 'GET', url: '/openapi.json' })).json().servers, [
    { url: '/', description: 'The instance serving this document.' },
    { url: '/sandboxes/{sandboxId}', description: 'A sandbox of the instance serving this document: create one on its operations API (`POST /sandboxes`), then put its id here.', variables: servers[1]?.variables }
  ])
  t.match((await api.app.inject({ method: 'GET', url: '/openapi.yaml' })).body, /servers:\n {2}- url: \/\n[\s\S]*- url: \/sandboxes\/\{sandboxId\}\n/, 'and in /openapi.yaml')
})

t.test('the contract is served as JSON and YAML, with Swagger UI at /docs', async (t) => {
  const api = await build(t)
  const json = await api.app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(json.statusCode, 200)
  const { info } = parse(readFileSync('openapi.yaml', 'utf8')) as { info: { version: string } }
  t.match(json.json(), { openapi: '3.1.0', info: { version: info.version } }, 'the contract\'s version, for a client team to pin')
  t.same(json.json().servers, [{ url: '/', description: 'The instance serving this document.' }], 'the served copy names the instance serving it')
  const yaml = await api.app.inject({ method: 'GET', url: '/openapi.yaml' })
  t.equal(yaml.statusCode, 200)
  t.match(yaml.headers['content-type'], /yaml/)
  t.match(yaml.body, /operationId: listItems/)
  t.match(yaml.body, /servers:\n {2}- url: \/\n/)
  const root = await api.call('openDocs')
  t.same([root.statusCode, root.headers.location], [302, '/docs'], 'the service\'s address leads to the docs')
  const docs = await api.app.inject({ method: 'GET', url: '/docs/' })
  t.equal(docs.statusCode, 200)
  t.match(docs.body, /swagger-ui/i)
  t.match(docs.headers, {
    'content-security-policy': /default-src 'self'.*frame-ancestors 'self'/,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'SAMEORIGIN',
    'referrer-policy': 'no-referrer'
  }, 'the docs carry helmet\'s headers')
})

t.test('every API response, error or not, forbids content sniffing and carries its request id', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const responses = [
    await api.call('listItems', { token: accessToken }),
    await api.call('listItems'),
    await api.call('checkLiveness'),
    await api.inject({ method: 'GET', url: '/v1/nowhere' }),
    await api.call('getItem', { token: accessToken, params: { itemId: 'not-an-id' } })
  ]
  t.same(responses.map((response) => response.statusCode), [200, 401, 200, 404, 400])
  for (const response of responses) {
    t.match(response.headers, { 'x-content-type-options': 'nosniff', 'x-request-id': /\S/ })
  }
})
