import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { routes as operationsRoutes } from '../../generated/operations/routes.js'
import { routes } from '../../generated/routes.js'
import { findDrift } from '../../scripts/generate.js'
import { CURRENT_VERSION_SAID } from '../../scripts/release.js'
import { loadConfig } from '../../src/config/config.js'
import { contractOperations } from '../support/contract-checks.js'

const run = promisify(execFile)
const quiet = {
  ...process.env,
  REDOCLY_TELEMETRY: 'off',
  REDOCLY_SUPPRESS_NOTIFICATIONS: 'true',
  REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
  SCARF_ANALYTICS: 'false',
  DO_NOT_TRACK: '1',
  NO_UPDATE_NOTIFIER: '1'
}

t.test('generated/ is what the contracts produce (run npm run generate after editing one)', async (t) => {
  t.same(await findDrift(), [])
})

t.test('the contract\'s major version is its paths\' prefix: /v1 serves 1.x', async (t) => {
  const { info, paths } = parse(await readFile('openapi.yaml', 'utf8')) as { info: { version: string }, paths: Record<string, unknown> }
  const prefixes = new Set(Object.keys(paths).flatMap((path) => /^\/v(\d+)\//.exec(path)?.[1] ?? []))
  t.same([...prefixes], [info.version.split('.')[0]], `info.version ${info.version}, paths under ${[...prefixes].map((major) => `/v${major}`).join(', ')}: ` +
    'a breaking change moves every path to its major\'s prefix (docs/contract.md, "Making a breaking change")')
})

t.test('every version the docs say is current is the contract\'s, and so is the client package\'s', async (t) => {
  const { info } = parse(await readFile('openapi.yaml', 'utf8')) as { info: { version: string } }
  const client = JSON.parse(await readFile('clients/typescript/package.json', 'utf8')) as { version: string, description: string }
  t.equal(client.version, info.version, 'the client package\'s version')
  t.match(client.description, `openapi.yaml ${info.version}`, 'and its description')
  for (const file of ['README.md', 'docs/clients.md', 'docs/contract.md']) {
    const text = await readFile(file, 'utf8')
    // What npm run release rewrites, each as it reads at this version.
    for (const [pattern, current] of CURRENT_VERSION_SAID) {
      for (const [said] of text.matchAll(pattern)) t.equal(said, said.replace(pattern, current(info.version)), `${file}: "${said}"`)
    }
  }
})

t.test('the contract\'s server is where a default start listens, so a generated client connects wherever localhost resolves', async (t) => {
  const { servers } = parse(await readFile('openapi.yaml', 'utf8')) as { servers: Array<{ url: string }> }
  const { host, port } = loadConfig({})
  t.equal(servers[0]?.url, `http://${host}:${port}`)
})

t.test('the route table has exactly the operations openapi.yaml declares, at their methods and paths', async (t) => {
  const fromTable = routes.map(({ operationId, method, url }) => ({ operationId, method, path: url.replace(/:(\w+)/g, '{$1}') }))
  const byId = (a: { operationId: string }, b: { operationId: string }): number => a.operationId.localeCompare(b.operationId)
  t.same(fromTable.sort(byId), contractOperations().sort(byId))
})

t.test('every operation of the operations API is under its one security scheme, opsToken, which the operations plugin enforces', async (t) => {
  t.same(operationsRoutes.filter((route) => route.security.join() !== 'opsToken').map((route) => route.operationId), [])
})

t.test('every operation declares a success, but the redirect to the docs (Redocly\'s operation-2xx-response, which redocly.yaml turns off for it)', async (t) => {
  const document = parse(await readFile('openapi.yaml', 'utf8')) as { paths: Record<string, Record<string, { responses?: Record<string, unknown> }>> }
  const withoutSuccess = contractOperations().filter(({ method, path }) =>
    !Object.keys(document.paths[path]?.[method.toLowerCase()]?.responses ?? {}).some((status) => /^2/.test(status)))
  t.same(withoutSuccess.map(({ operationId }) => operationId), ['openDocs'])
})

t.test('every response of a rate-limited operation declares the RateLimit fields, and its 429 a required Retry-After', async (t) => {
  type Response = { $ref?: string, headers?: Record<string, { $ref?: string, required?: boolean }> }
  const document = parse(await readFile('openapi.yaml', 'utf8')) as {
    paths: Record<string, Record<string, { operationId?: string, responses?: Record<string, Response> }>>
    components: { responses: Record<string, Response>, headers: Record<string, { required?: boolean }> }
  }
  const resolved = (response: Response): Response => response.$ref === undefined ? response : document.components.responses[response.$ref.split('/').at(-1) ?? ''] ?? {}
  const limited = new Set<string>(routes.filter((route) => route.rateLimits.length > 0).map((route) => route.operationId))
  const undeclared = Object.values(document.paths).flatMap((pathItem) => Object.values(pathItem))
    .filter((operation) => limited.has(operation.operationId ?? ''))
    .flatMap((operation) => Object.entries(operation.responses ?? {}).flatMap(([status, response]) =>
      ['RateLimit-Policy', 'RateLimit'].filter((header) => resolved(response).headers?.[header] === undefined)
        .map((header) => `${operation.operationId} ${status} ${header}`)))
  t.same(undeclared, [])
  t.equal(document.components.headers['Retry-After']?.required, true)
  t.equal(document.components.responses.TooManyRequests?.headers?.['Retry-After']?.$ref, '#/components/headers/Retry-After')
})

// The public API's contract and the operations API's.
const contracts = ['openapi.yaml', 'ops/openapi.yaml']

t.test('the contracts lint clean under Redocly recommended', async (t) => {
  for (const contract of contracts) {
    const { stdout } = await run('npx', ['redocly', 'lint', contract, '--format', 'json'], { env: quiet })
    const { totals: { errors, warnings } } = JSON.parse(stdout.slice(stdout.indexOf('{'))) as { totals: { errors: number, warnings: number } }
    t.same({ errors, warnings }, { errors: 0, warnings: 0 }, `${contract}: zero errors and zero warnings`)
  }
})

t.test('the contracts lint clean under Spectral spectral:oas', async (t) => {
  const { stdout } = await run('npx', ['spectral', 'lint', '--format', 'json', '--quiet', ...contracts], { env: quiet })
  t.same(JSON.parse(stdout), [])
})

t.test('in Swagger UI, each response of both contracts reads in at most two lines, and the document opens in plain words', async (t) => {
  interface Response { readonly description?: string }
  interface Operation { readonly responses?: Record<string, Response> }
  interface Document {
    readonly info: { readonly description: string }
    readonly paths: Record<string, Record<string, Operation>>
    readonly webhooks?: Record<string, Record<string, Operation>>
    readonly components: { readonly responses?: Record<string, Response> }
  }
  // Two lines of the width the contracts wrap at: a description is folded to its first line where it is longer.
  const fitsTwoLines = (text: string): boolean => text.trim().split('\n').length <= 2 && text.length <= 240
  for (const file of ['openapi.yaml', 'ops/openapi.yaml']) {
    const document = parse(await readFile(file, 'utf8')) as Document
    const responses = [
      ...Object.entries(document.components.responses ?? {}),
      ...[...Object.entries(document.paths), ...Object.entries(document.webhooks ?? {})].flatMap(([path, operations]) =>
        Object.entries(operations).flatMap(([method, operation]) =>
          Object.entries(operation.responses ?? {}).map(([status, response]) => [`${path} ${method} ${status}`, response] as const)))
    ]
    const long = responses.filter(([, response]) => !fitsTwoLines(response.description ?? '')).map(([where]) => where)
    t.same(long, [], `${file}: every response's description fits two lines`)
    t.notMatch(document.info.description, /x-roles|x-rate-limits|x-load-shedding|Structured Fields/, `${file}: the document's description names no extension, nor the headers' grammar`)
  }
})
