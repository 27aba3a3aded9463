// The official client (clients/typescript/) as a client team gets it: packed, installed from its tarball into an
// empty project, docs/clients.md's example type-checked with strict options against the installed package, then run
// on each store through a proxy that loses an answer and injects a 429 and a 503.
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import ts from 'typescript'
import { faultyProxy } from './faulty-proxy.js'
import { Api, buildTestApp } from './helper.js'
import { redisKeyPrefix, redisSkip } from './redis.js'

const run = promisify(execFile)
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

t.test('the client packs, installs into an empty project, and its documented use type-checks there', async (t) => {
  t.equal(version, contractVersion, 'the package\'s version is the contract\'s')
  rmSync(project, { recursive: true, force: true })
  mkdirSync(project, { recursive: true })
  const { stdout } = await run('npm', ['pack', './clients/typescript', '--pack-destination', project, '--silent'], { maxBuffer: 16 * 1024 * 1024 })
  const tarball = stdout.trim().split('\n').at(-1) ?? ''
  t.equal(tarball, `items-service-client-${version}.tgz`)
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
  await run('npm', ['install', `./${tarball}`, '@types/node@20', '--prefer-offline', '--no-audit', '--no-fund', '--silent'], { cwd: project })
  const example = /```ts\n([\s\S]*?)```/.exec(readFileSync('docs/clients.md', 'utf8'))?.[1]
  t.ok(example, 'docs/clients.md shows its use')
  writeFileSync(join(project, 'client.ts'), example ?? '')
  t.same(typeErrors(join(project, 'client.ts')), [], 'it type-checks against the installed package alone')
})

for (const store of ['memory', 'redis'] as const) {
  t.test(`on the ${store} store, the documented use runs through lost answers, a 429 and a 503: each item once, one refresh for eight requests`, { skip: store === 'redis' ? await redisSkip() : false }, async (t) => {
    const env = store === 'redis' ? { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) } : {}
    // An access token of 4 s: after the example's wait it has expired, and eight requests find it so at once.
    const app = await buildTestApp(t, { ...env, ACCESS_TOKEN_TTL_SECONDS: '4' })
    const service = await app.listen({ host: '127.0.0.1', port: 0 })
    const proxy = await faultyProxy(service, [
      { matches: { method: 'POST', url: '/v1/items' }, fault: 'drop' },
      { matches: { method: 'POST', url: '/v1/items' }, fault: 503 },
      { matches: { method: 'GET', url: '/v1/items?pageSize=10' }, fault: 429 }
    ])
    t.teardown(proxy.close)

    // As a client team runs it (tsx, from its own project): not under the suite's loader, so outside its coverage.
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
