// The official client (clients/typescript/) as a client team gets it: packed, installed from its tarball into an
// empty project, docs/clients.md's example type-checked with strict options against the installed package, then run
// on each store through a proxy that loses an answer and injects a 429 and a 503.
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import ts from 'typescript'
import { createItemsClient, etagOf, ItemsApiError, ItemsNetworkError, ok, okOrUnchanged, type Session } from '../../clients/typescript/src/index.js'
import { type Fault, faultyProxy } from '../support/faulty-proxy.js'
import { Api, newUser } from '../support/api.js'
import { buildTestApp } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

const run = promisify(execFile)
// The tests are independent (each an app, a proxy and a user of its own) and mostly wait: three run at a time.
t.jobs = 3
const project = resolve('.tap', 'client-consumer')
const version = (JSON.parse(readFileSync('clients/typescript/package.json', 'utf8')) as { version: string }).version
const contractVersion = /^ {2}version: (\S+)$/m.exec(readFileSync('openapi.yaml', 'utf8'))?.[1]

function typeErrors (file: string): string[] {
  const program = ts.createProgram([file], {
    strict: true,
    noUncheckedIndexedAccess: true,
    exactOptionalPropertyTypes: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
    types: ['node'],
    noEmit: true
  })
  return ts.getPreEmitDiagnostics(program).map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'))
}

// The client packed and installed into an empty project, with the use docs/clients.md shows, as a client team would:
// begun at once, since the tests of that use below run it there.
async function installedForAClientTeam (): Promise<{ tarball: string, packed: string[], example: string | undefined }> {
  rmSync(project, { recursive: true, force: true })
  mkdirSync(project, { recursive: true })
  const { stdout } = await run('npm', ['pack', './clients/typescript', '--pack-destination', project, '--silent'], { maxBuffer: 16 * 1024 * 1024 })
  const tarball = stdout.trim().split('\n').at(-1) ?? ''
  const packed = (await run('tar', ['-tzf', join(project, tarball)])).stdout.split('\n')
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
  await run('npm', ['install', `./${tarball}`, '@types/node@20', '--prefer-offline', '--no-audit', '--no-fund', '--silent'], { cwd: project })
  const example = /```ts\n([\s\S]*?)```/.exec(readFileSync('docs/clients.md', 'utf8'))?.[1]
  writeFileSync(join(project, 'client.ts'), example ?? '')
  return { tarball, packed, example }
}
const installed = installedForAClientTeam()
// Its failure is reported by the tests that await it, not as an unhandled rejection before then.
installed.catch(() => {})

t.test('the client packs, installs into an empty project, and its documented use type-checks there', async (t) => {
  t.equal(version, contractVersion, 'the package\'s version is the contract\'s')
  const { tarball, packed, example } = await installed
  t.equal(tarball, `items-service-client-${version}.tgz`)
  t.ok(packed.includes('package/README.md') && packed.includes('package/LICENSE'), 'with its README and LICENSE')
  t.ok(example, 'docs/clients.md shows its use')
  t.same(typeErrors(join(project, 'client.ts')), [], 'it type-checks against the installed package alone')
})

for (const store of ['memory', 'redis'] as const) {
  t.test(`on the ${store} store, the documented use runs through lost answers, a 429 and a 503: each item once, one refresh for eight requests`, { skip: store === 'redis' ? await redisSkip() : false }, async (t) => {
    const env = store === 'redis' ? { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) } : { STORE: 'memory' }
    // An access token of 4 s: after the example's wait it has expired, and eight requests find it so at once.
    const app = await buildTestApp(t, { ...env, ACCESS_TOKEN_TTL_SECONDS: '4' })
    const service = await app.listen({ host: '127.0.0.1', port: 0 })
    const proxy = await faultyProxy(service, [
      { matches: { method: 'POST', url: '/v1/items' }, fault: 'drop' },
      { matches: { method: 'POST', url: '/v1/items' }, fault: 503 },
      { matches: { method: 'GET', url: '/v1/items?pageSize=10' }, fault: 429 }
    ])
    t.teardown(proxy.close)

    // As a client team runs it (tsx, from its own project): not with the suite's Node options and coverage hooks, so outside its coverage.
    await installed
    const child = spawn(process.execPath, ['--import', 'tsx', join(project, 'client.ts')], {
      env: { ...process.env, ITEMS_API: proxy.url, WAIT_MS: '4500' },
      stdio: ['ignore', 'pipe', 'inherit']
    })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
    const [code] = await once(child, 'exit') as [number | null]
    t.equal(code, 0)
    t.equal(output, 'created Difference engine\ncreated Analytical engine\ncreated Jacquard loom\nnot found: 404 NOT_FOUND\nlisted 3 3 3 3 3 3 3 3\n')

    t.same(proxy.injected, ['POST /v1/items drop', 'POST /v1/items 503', 'GET /v1/items?pageSize=10 429'], 'every fault was met')
    // A token's times are whole seconds: it may end up to a second before its expiresIn says, and a request that
    // meets its end (401 TOKEN_EXPIRED) is sent again after the one refresh; the stores saw each create as below.
    const creates = proxy.forwarded.filter((request) => request.method === 'POST' && request.url === '/v1/items' && request.status !== 401)
    t.same(creates.map(({ status, replayed }) => [status, replayed]), [[201, null], [201, 'true'], [201, null], [201, null]],
      'the create whose answer was lost was sent again, and answered with its item')
    t.equal(creates[0]?.idempotencyKey, creates[1]?.idempotencyKey, 'with its key')
    t.equal(new Set(creates.map((request) => request.idempotencyKey)).size, 3, 'a key of its own for each create')
    // After the 404, the example waits out the token; a slow machine may have refreshed it once before.
    const waited = proxy.forwarded.findIndex(({ status }) => status === 404)
    const refreshes = proxy.forwarded.slice(waited).filter((request) => request.url === '/v1/auth/refresh')
    t.same(refreshes.map(({ status }) => status), [200], 'one refresh for the eight requests that met the expired token')
    t.same(proxy.forwarded.filter((request) => request.url.startsWith('/v1/items?')).map(({ status }) => status), Array(8).fill(200),
      'each list reached the service once (the refused one again), none with the expired token')

    const api = new Api(app)
    const { accessToken } = await api.register({ role: 'viewer' })
    const listed = (await api.call('listItems', { token: accessToken })).json()
    t.same(listed.data.map((item: { name: string }) => item.name), ['Difference engine', 'Analytical engine', 'Jacquard loom'], 'each item once')
  })
}

// The client's own behaviour, each through the faulty proxy in front of a listening service (from its source, in
// this process: the packed client is the same code, run above).
async function behindProxy (t: Test, faults: readonly Fault[], env: NodeJS.ProcessEnv = {}) {
  const app = await buildTestApp(t, env)
  const proxy = await faultyProxy(await app.listen({ host: '127.0.0.1', port: 0 }), faults)
  t.teardown(proxy.close)
  const sessions: Array<Session | undefined> = []
  const client = createItemsClient({ baseUrl: proxy.url, onSession: (session) => { sessions.push(session) } })
  await client.register(newUser({ role: 'contributor' }))
  return { client, proxy, sessions }
}

t.test('a refresh whose answer was lost is sent again with the same token, within the leeway, and the session lives on', async (t) => {
  const { client, proxy, sessions } = await behindProxy(t, [{ matches: { method: 'POST', url: '/v1/auth/refresh' }, fault: 'drop' }])
  client.resume(client.session!)
  t.equal((await ok(client.api.GET('/v1/items'))).pagination.total, 0, 'the request that needed the refresh is served')
  t.same(proxy.forwarded.filter(({ url }) => url === '/v1/auth/refresh').map(({ status, answered }) => [status, answered]), [[200, false], [200, true]])
  t.not(sessions.at(-1), undefined, 'the session did not end')
  client.resume(client.session!)
  t.equal((await ok(client.api.GET('/v1/items'))).pagination.total, 0, 'and the pair it got refreshes again')
})

t.test('every failure is one typed error: a non-JSON answer an ItemsApiError, a lost answer an ItemsNetworkError; a 304 is a result', async (t) => {
  const { client } = await behindProxy(t, [
    { matches: { method: 'GET', url: '/v1/items' }, fault: 502 },
    { matches: { method: 'PATCH', url: '/v1/items/00000000-0000-4000-8000-000000000000' }, fault: 'drop' }
  ])
  const proxied = await ok(client.api.GET('/v1/items')).catch((error: unknown) => error)
  t.ok(proxied instanceof ItemsApiError, 'a proxy\'s HTML 502 is an ItemsApiError')
  t.match(proxied, { status: 502, code: undefined, message: 'The service answered 502.' })
  // An edit without If-Match is not sent again after a lost answer: it may have been made.
  const lost = await ok(client.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId: '00000000-0000-4000-8000-000000000000' } }, body: { name: 'x' } }))
    .catch((error: unknown) => error)
  t.ok(lost instanceof ItemsNetworkError, `a lost answer is an ItemsNetworkError: ${String(lost)}`)
  const item = await ok(client.api.POST('/v1/items', { body: { name: 'cached' } }))
  const read = await client.api.GET('/v1/items/{itemId}', { params: { path: { itemId: item.id } } })
  const etag = read.response.headers.get('etag') ?? ''
  const again = client.api.GET('/v1/items/{itemId}', { params: { path: { itemId: item.id }, header: { 'If-None-Match': etag } } })
  t.equal(await okOrUnchanged(again), undefined, 'a 304: the copy held is current')
  const unchanged = await ok(client.api.GET('/v1/items/{itemId}', { params: { path: { itemId: item.id }, header: { 'If-None-Match': etag } } }))
    .catch((error: unknown) => error)
  t.match(unchanged, { name: 'ItemsApiError', status: 304 }, 'ok() says so with the error type, not a TypeError')
})

t.test('a DELETE sent again after its answer was lost, which finds the item gone, is done', async (t) => {
  const { client, proxy } = await behindProxy(t, [])
  const item = await ok(client.api.POST('/v1/items', { body: { name: 'to remove' } }))
  proxy.inject({ matches: { method: 'DELETE', url: `/v1/items/${item.id}` }, fault: 'drop' })
  await ok(client.api.DELETE('/v1/items/{itemId}', { params: { path: { itemId: item.id } } }))
  t.same(proxy.forwarded.filter(({ method }) => method === 'DELETE').map(({ status, answered }) => [status, answered]), [[204, false], [404, true]],
    'the first removed it; the second found it gone')
})

t.test('a request waiting out a Retry-After stops the moment its signal aborts', async (t) => {
  // A wait within the client's bound (10 s), which the signal ends long before.
  const { client, proxy } = await behindProxy(t, [{ matches: { method: 'GET', url: '/v1/items' }, fault: 429, retryAfter: 9 }])
  const aborted = await client.api.GET('/v1/items', { signal: AbortSignal.timeout(100) }).catch((error: unknown) => error)
  t.match(aborted, { name: 'TimeoutError' }, 'rejected with the signal\'s reason')
  t.same(proxy.injected, ['GET /v1/items 429'], 'after the 429 it was waiting for')
})

t.test('a Retry-After longer than the client waits (10 s by default) is not waited out: the 429 is the answer, saying when to try again', async (t) => {
  // An hour's wait: a client that waited it out would hold this test until tap's limit fails it.
  const { client, proxy } = await behindProxy(t, [{ matches: { method: 'GET', url: '/v1/items' }, fault: 429, retryAfter: 3600 }])
  const refused = await ok(client.api.GET('/v1/items')).catch((error: unknown) => error)
  t.ok(refused instanceof ItemsApiError, 'the typed error')
  t.match(refused, { status: 429, code: 'RATE_LIMITED', retryAfterSeconds: 3600 })
  t.same(proxy.injected, ['GET /v1/items 429'], 'sent once')
})

t.test('for await walks every page of a filtered list, each item once', async (t) => {
  const { client } = await behindProxy(t, [])
  const archived = new Set<string>()
  for (let index = 0; index < 23; index += 1) {
    const item = await ok(client.api.POST('/v1/items', { body: { name: `item ${index}` } }))
    if (index % 2 === 0) {
      await ok(client.api.PATCH('/v1/items/{itemId}', { params: { path: { itemId: item.id } }, body: { status: 'archived' } }))
      archived.add(item.id)
    }
  }
  const walked: string[] = []
  for await (const item of client.allItems({ status: 'archived', pageSize: 5 })) {
    t.equal(item.status, 'archived')
    walked.push(item.id)
  }
  t.equal(walked.length, 12, 'three pages of five and one of two')
  t.same(new Set(walked), archived, 'each archived item, once')
})

t.test('each item operation is a method, generated from the contract; retry: false sends a request once', async (t) => {
  const { client, proxy } = await behindProxy(t, [])
  const created = await client.items.create({ name: 'by method' })
  t.match(created, { name: 'by method', status: 'active' })
  t.equal((await client.items.get(created.id)).id, created.id)
  t.equal((await client.items.update(created.id, { status: 'archived' })).status, 'archived')
  t.same((await client.items.list({ status: 'archived' })).data.map(({ id }) => id), [created.id])
  await client.items.delete(created.id)
  const gone = await client.items.get(created.id).catch((error: unknown) => error)
  t.match(gone, { name: 'ItemsApiError', status: 404, code: 'NOT_FOUND' })

  proxy.inject({ matches: { method: 'GET', url: '/v1/items' }, fault: 503 })
  const once = await client.items.list(undefined, { retry: false }).catch((error: unknown) => error)
  t.match(once, { name: 'ItemsApiError', status: 503 }, 'retry: false: the 503 is the answer')
  proxy.inject({ matches: { method: 'GET', url: '/v1/items' }, fault: 503 })
  t.equal((await client.items.list()).pagination.total, 0, 'retried by default')
  t.ok(proxy.forwarded.every(({ headers }) => !Object.keys(headers).some((name) => name.startsWith('x-items-client'))), 'the marker never leaves the client')
})

t.test('no request follows a redirect: what a 307 names receives nothing, and the caller gets the 307 as an ItemsApiError', async (t) => {
  // A second origin that records whatever reaches it.
  const received: string[] = []
  const elsewhere = createServer((request, response) => {
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => { received.push(`${String(request.method)} ${String(request.url)} ${body}`); response.end('{}') })
  })
  elsewhere.listen(0, '127.0.0.1')
  await once(elsewhere, 'listening')
  t.teardown(() => { elsewhere.close() })
  const location = `http://127.0.0.1:${(elsewhere.address() as AddressInfo).port}`
  const { client, proxy } = await behindProxy(t, [])
  const user = newUser()
  await client.register(user)
  for (const url of ['/v1/auth/login', '/v1/auth/refresh', '/v1/items']) proxy.inject({ matches: { method: url === '/v1/items' ? 'GET' : 'POST', url }, fault: 307, location })
  const signIn = await client.signIn(user.email, user.password).catch((error: unknown) => error)
  t.match(signIn, { name: 'ItemsApiError', status: 307, message: `The service answered 307, a redirect to ${location}/v1/auth/login, which this client does not follow.` })
  t.match(await client.refresh().catch((error: unknown) => error), { name: 'ItemsApiError', status: 307 }, 'a refresh too')
  t.match(await client.items.list().catch((error: unknown) => error), { name: 'ItemsApiError', status: 307 }, 'and a read')
  t.same(received, [], 'the password and the refresh token went nowhere else')
  t.same(proxy.injected.length, 3)
})

t.test('a create answered 504 OUTCOME_UNKNOWN is sent again with its key and made once; every error a create throws carries its key', async (t) => {
  const { client, proxy } = await behindProxy(t, [{ matches: { method: 'POST', url: '/v1/items' }, fault: 504 }])
  const created = await client.items.create({ name: 'once' })
  const creates = proxy.forwarded.filter(({ method, url }) => method === 'POST' && url === '/v1/items')
  t.same(creates.map(({ status, replayed, answered }) => [status, replayed, answered]), [[201, null, false], [201, 'true', true]], 'made, then replayed')
  t.equal(creates[0]?.idempotencyKey, creates[1]?.idempotencyKey, 'with one key')
  t.equal((await client.items.list()).pagination.total, 1)
  t.equal(created.id, (await client.items.list()).data[0]?.id)

  for (let attempt = 0; attempt < 5; attempt += 1) proxy.inject({ matches: { method: 'POST', url: '/v1/items' }, fault: 'drop' })
  const lost = await client.items.create({ name: 'lost' }).catch((error: unknown) => error)
  t.ok(lost instanceof ItemsNetworkError && typeof lost.idempotencyKey === 'string', 'a lost answer, every attempt: the error carries the key')
  const key = (lost as ItemsNetworkError).idempotencyKey!
  const resolved = await client.items.create({ name: 'lost' }, { headers: { 'idempotency-key': key } })
  t.equal(resolved.name, 'lost', 'the caller resolves it with the key')
  t.equal((await client.items.list()).pagination.total, 2, 'made once')
  for (let attempt = 0; attempt < 5; attempt += 1) proxy.inject({ matches: { method: 'POST', url: '/v1/items' }, fault: 503 })
  const refused = await client.items.create({ name: 'refused' }).catch((error: unknown) => error)
  t.match(refused, { name: 'ItemsApiError', status: 503, idempotencyKey: /^[0-9a-f-]{36}$/ }, 'an answer as well')
  t.equal((await client.items.list()).pagination.total, 2)
})

t.test('refresh() renews the session now and keeps client.session the new one', async (t) => {
  const { client, sessions } = await behindProxy(t, [])
  const before = client.session!
  const renewed = await client.refresh()
  t.not(renewed.refreshToken, before.refreshToken)
  t.equal(client.session, renewed, 'client.session is the new one')
  t.equal(sessions.at(-1), renewed, 'and onSession was told')
  t.equal((await client.items.list()).pagination.total, 0, 'it serves')
  t.equal((await client.refresh()).user.id, before.user.id, 'and refreshes again')
  await client.signOut()
  t.match(await client.refresh().catch((error: unknown) => error), { name: 'TypeError' }, 'no session, nothing to refresh')
})

t.test('the item methods give the ETag and take ifMatch and ifNoneMatch: a 304 is the caller\'s copy, a stale If-Match a 412', async (t) => {
  const { client, proxy } = await behindProxy(t, [])
  const created = await client.items.create({ name: 'tagged' })
  t.match(etagOf(created), /^"/, 'a create gives its ETag')
  const unchanged = await client.items.get(created.id, { ifNoneMatch: created })
  t.equal(unchanged, created, 'unchanged: the caller\'s own copy')
  t.equal(proxy.forwarded.at(-1)?.status, 304, 'which the service did not send again')
  const edited = await client.items.update(created.id, { name: 'edited' }, { ifMatch: created })
  t.equal(edited.name, 'edited', 'an edit of the item as read')
  t.not(etagOf(edited), etagOf(created))
  const stale = await client.items.update(created.id, { name: 'again' }, { ifMatch: created }).catch((error: unknown) => error)
  t.match(stale, { name: 'ItemsApiError', status: 412 }, 'an edit of a copy since changed')
  t.same(await client.items.get(created.id, { ifNoneMatch: created }), edited, 'a changed item is sent')
  t.same(await client.items.get(created.id, { ifNoneMatch: etagOf(created)! }), edited, 'an ETag alone works too')
  t.match(await client.items.get(created.id, { ifNoneMatch: etagOf(edited)! }).catch((error: unknown) => error), { name: 'ItemsApiError', status: 304 },
    'with which a 304 has no copy to give: the raw call with okOrUnchanged says so')
  await t.rejects(client.items.get(created.id, { ifNoneMatch: {} }), { name: 'TypeError' }, 'an object the client did not give has no ETag')
})
