// docs/clients.md's client, as a client team would use it: types generated from a running service, the block
// type-checked with strict options, then run through a proxy that drops the answer to its first create.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import openapiTS, { astToString } from 'openapi-typescript'
import t from 'tap'
import ts from 'typescript'
import { Api, buildTestApp } from './helper.js'

interface Forwarded {
  method: string
  url: string
  status: number
  idempotencyKey: string | undefined
  replayed: string | null
}

const HOP_BY_HOP = new Set(['host', 'connection', 'keep-alive', 'content-length', 'transfer-encoding'])

/**
 * A proxy to `target` that records what it forwards, and cuts the connection instead of answering the first
 * POST /v1/items, once the service has answered it: the client cannot tell whether the item was stored.
 */
async function droppingProxy (target: string): Promise<{ url: string, forwarded: Forwarded[], close: () => Promise<void> }> {
  const forwarded: Forwarded[] = []
  let dropped = false
  const forward = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    // The end-to-end headers: fetch sets the connection's own.
    const headers = Object.fromEntries(Object.entries(request.headers).filter((entry): entry is [string, string] =>
      typeof entry[1] === 'string' && !HOP_BY_HOP.has(entry[0])))
    const answer = await fetch(`${target}${request.url ?? '/'}`, { method: request.method ?? 'GET', headers, ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }) })
    const body = Buffer.from(await answer.arrayBuffer())
    forwarded.push({ method: String(request.method), url: String(request.url), status: answer.status, idempotencyKey: headers['idempotency-key'], replayed: answer.headers.get('idempotent-replayed') })
    if (!dropped && request.method === 'POST' && request.url === '/v1/items') {
      dropped = true
      request.socket.destroy()
      return
    }
    response.writeHead(answer.status, Object.fromEntries([...answer.headers].filter(([name]) => !HOP_BY_HOP.has(name))))
    response.end(body)
  }
  const server = createServer((request, response) => { forward(request, response).catch(() => { response.destroy() }) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    forwarded,
    close: async () => { server.closeAllConnections(); await new Promise((resolve) => server.close(resolve)) }
  }
}

function typeErrors (file: string): string[] {
  const program = ts.createProgram([file], {
    strict: true,
    noUncheckedIndexedAccess: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: ['node'],
    skipLibCheck: true,
    noEmit: true
  })
  return ts.getPreEmitDiagnostics(program).map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'))
}

t.test('docs/clients.md: the client type-checks, and retries a create whose answer was lost with its key: each item once', async (t) => {
  // Two writes a second: the third create waits for the next window, as the RateLimit field says.
  const app = await buildTestApp(t, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '2', RATE_LIMIT_WINDOW_SECONDS: '1' })
  const service = await app.listen({ host: '127.0.0.1', port: 0 })
  const proxy = await droppingProxy(service)
  t.teardown(proxy.close)

  const dir = join('.tap', 'clients-doc')
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'items-api.d.ts'), astToString(await openapiTS(new URL(`${service}/openapi.json`))))
  const example = /```ts\n([\s\S]*?)```/.exec(readFileSync('docs/clients.md', 'utf8'))?.[1]
  t.ok(example, 'the example is there')
  const client = join(dir, 'client.ts')
  writeFileSync(client, example ?? '')
  t.same(typeErrors(client), [], 'it type-checks against the generated types')

  // As a client team runs it (tsx): not under the suite's loader, so outside its coverage, which is of src/ alone.
  const run = spawn(process.execPath, ['--import', 'tsx', client], { env: { ...process.env, ITEMS_API: proxy.url }, stdio: ['ignore', 'pipe', 'inherit'] })
  let output = ''
  run.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const [code] = await once(run, 'exit') as [number | null]
  t.equal(code, 0)
  t.match(output, /^created Difference engine \([0-9a-f-]{36}\)\ncreated Analytical engine \(.*\)\ncreated Jacquard loom \(.*\)\n$/)

  const creates = proxy.forwarded.filter((request) => request.method === 'POST' && request.url === '/v1/items')
  t.same(creates.map(({ status, replayed }) => [status, replayed]), [[201, null], [201, 'true'], [201, null], [201, null]],
    'the create whose answer was lost was sent again, and answered with its item')
  t.equal(creates[0]!.idempotencyKey, creates[1]!.idempotencyKey, 'with its key')
  t.equal(new Set(creates.map((request) => request.idempotencyKey)).size, 3)
  t.notOk(proxy.forwarded.some((request) => request.status === 429), 'it waited for room instead of being refused')
  const api = new Api(app)
  const { accessToken } = await api.register({ role: 'viewer' })
  const listed = (await api.call('listItems', { token: accessToken })).json()
  t.same(listed.data.map((item: { name: string }) => item.name), ['Difference engine', 'Analytical engine', 'Jacquard loom'], 'each item once')
})
