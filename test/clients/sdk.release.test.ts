// The gate for client teams: three independent generators turn openapi.yaml into clients without a warning, and
// the two that write SDKs give one typed function per operationId that type-checks in use, with the contract's
// server as their default base URL and no type that shadows a built-in.
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { parse } from 'yaml'

const run = promisify(execFile)
const quiet = { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', NO_UPDATE_NOTIFIER: '1', REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_NOTIFICATIONS: 'true', DO_NOT_TRACK: '1' }
const contractServer = (parse(await readFile('openapi.yaml', 'utf8')) as { servers: Array<{ url: string }> }).servers[0]?.url ?? ''
// A client project's usual settings: strict, with the libraries' declarations taken as given (skipLibCheck), so
// that what is checked is the generated code and its use.
const strictConfig = JSON.stringify({
  compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: true, lib: ['ES2022', 'DOM', 'DOM.Iterable'] },
  include: ['**/*.ts']
})

/** Runs a generator installed in this project; resolves with what it printed, both streams. */
async function generate (command: string, args: string[], cwd?: string): Promise<string> {
  const { stdout, stderr } = await run(join(process.cwd(), 'node_modules', '.bin', command), args, { env: quiet, cwd })
  return `${stdout}${stderr}`
}

const warningsIn = (output: string): string[] => output.split('\n').filter((line) => /warn|⚠/i.test(line))

async function scratchDirectory (t: Test): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'items-sdk-'))
  t.teardown(async () => { await rm(directory, { recursive: true, force: true }) })
  return directory
}

/** Type-checks every .ts file in the directory under `strict`; resolves with tsc's complaints, if any. */
async function typeCheck (directory: string): Promise<string> {
  await writeFile(join(directory, 'tsconfig.json'), strictConfig)
  const { stdout } = await run(join(process.cwd(), 'node_modules', '.bin', 'tsc'), ['-p', join(directory, 'tsconfig.json')]).catch((error: { stdout: string }) => error)
  return stdout
}

const shadowingGlobals = (source: string): string[] =>
  [...source.matchAll(/^export (?:type|interface|const) (\w+)/gm)].map((match) => match[1] ?? '').filter((name) => name in globalThis)

t.test('openapi-typescript (the types openapi-fetch is typed by) generates without a warning', async (t) => {
  const directory = await scratchDirectory(t)
  const output = await generate('openapi-typescript', ['openapi.yaml', '-o', join(directory, 'openapi.ts')])
  t.same(warningsIn(output), [], 'no warning')
  // test/e2e.test.ts walks the whole spec through openapi-fetch typed by the same types (generated/openapi.ts).
  t.match(await readFile(join(directory, 'openapi.ts'), 'utf8'), /"\/v1\/items\/\{itemId\}": \{/)
})

t.test('@hey-api/openapi-ts generates an SDK without a warning, and it type-checks in use', async (t) => {
  const directory = await scratchDirectory(t)
  const output = await generate('openapi-ts', ['-i', 'openapi.yaml', '-o', join(directory, 'client'), '-c', '@hey-api/client-fetch', '--no-log-file'])
  t.same(warningsIn(output), [], 'no warning')
  await writeFile(join(directory, 'usage.ts'), `
import { checkLiveness, checkReadiness, createItem, deleteItem, getItem, listItems, loginUser, logoutUser, refreshTokens, registerUser, updateItem } from './client/index.js'
import type { Item, ItemList } from './client/index.js'

export async function walk (): Promise<void> {
  await checkLiveness()
  await checkReadiness()
  await registerUser({ body: { email: 'a@example.com', password: 'password1', firstName: 'A', lastName: 'B', role: 'viewer' } })
  const { data: auth } = await loginUser({ body: { email: 'a@example.com', password: 'password1' } })
  await refreshTokens({ body: { refreshToken: auth?.refreshToken ?? '' } })
  const page: ItemList | undefined = (await listItems({ query: { page: 1, pageSize: 20 } })).data
  const created: Item | undefined = (await createItem({ body: { name: 'n', description: null } })).data
  const itemId = created?.id ?? page?.data[0]?.id ?? ''
  await getItem({ path: { itemId }, headers: { 'If-None-Match': '"1"' } })
  await updateItem({ path: { itemId }, body: { status: 'archived' } })
  await deleteItem({ path: { itemId } })
  await logoutUser()
  const e: Error = new Error('the built-in Error is still itself')
  void e
}
`)
  t.equal(await typeCheck(directory), '', 'the generated SDK and its use type-check')
  t.match(await readFile(join(directory, 'client', 'client.gen.ts'), 'utf8'), `baseUrl: '${contractServer}'`, 'the contract\'s server is the default base URL')
  const types = await readFile(join(directory, 'client', 'types.gen.ts'), 'utf8')
  t.match(types, /^export type ErrorResponse = /m, 'the error body is a type of its own')
  t.same(shadowingGlobals(types), [], 'no generated type shadows a built-in (Error, Response, …)')
})

t.test('orval generates a fetch client without a warning, and it type-checks in use', async (t) => {
  const directory = await scratchDirectory(t)
  // orval 8 needs Node 22.18; 7.13 runs on every Node the service supports.
  await writeFile(join(directory, 'orval.config.cjs'), `module.exports = { items: { input: ${JSON.stringify(join(process.cwd(), 'openapi.yaml'))}, output: { target: './client/items.ts', client: 'fetch', baseUrl: { getBaseUrlFromSpecification: true } } } }\n`)
  const output = await generate('orval', ['--config', join(directory, 'orval.config.cjs')], directory)
  t.same(warningsIn(output), [], 'no warning')
  await writeFile(join(directory, 'usage.ts'), `
import { checkLiveness, checkReadiness, createItem, deleteItem, getItem, listItems, loginUser, logoutUser, refreshTokens, registerUser, updateItem } from './client/items.js'
import type { Item, ItemList } from './client/items.js'

export async function walk (): Promise<void> {
  await checkLiveness()
  await checkReadiness()
  await registerUser({ email: 'a@example.com', password: 'password1', firstName: 'A', lastName: 'B', role: 'viewer' })
  const auth = await loginUser({ email: 'a@example.com', password: 'password1' })
  if (auth.status === 200) await refreshTokens({ refreshToken: auth.data.refreshToken })
  const listed = await listItems({ page: 1, pageSize: 20 })
  const page: ItemList | undefined = listed.status === 200 ? listed.data : undefined
  const made = await createItem({ name: 'n', description: null })
  const created: Item | undefined = made.status === 201 ? made.data : undefined
  const itemId = created?.id ?? page?.data[0]?.id ?? ''
  await getItem(itemId, { headers: { 'If-None-Match': '"1"' } })
  await updateItem(itemId, { status: 'archived' })
  await deleteItem(itemId)
  await logoutUser()
  const e: Error = new Error('the built-in Error is still itself')
  void e
}
`)
  t.equal(await typeCheck(directory), '', 'the generated client and its use type-check')
  const client = await readFile(join(directory, 'client', 'items.ts'), 'utf8')
  t.match(client, `\`${contractServer}/v1/items\``, 'the contract\'s server is the default base URL')
  t.same(shadowingGlobals(client), [], 'no generated type shadows a built-in (Error, Response, …)')
})
