// The gate for client teams: a second, independent generator (@hey-api/openapi-ts) must turn the contract into an
// SDK that type-checks, with one typed function per operationId.
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const run = promisify(execFile)

t.test('@hey-api/openapi-ts generates an SDK from openapi.yaml that type-checks', async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'items-sdk-'))
  t.teardown(async () => { await rm(directory, { recursive: true, force: true }) })
  await run('npx', ['openapi-ts', '-i', 'openapi.yaml', '-o', join(directory, 'client'), '-c', '@hey-api/client-fetch', '--no-log-file', '--silent'])
  await writeFile(join(directory, 'usage.ts'), `
import { createItem, deleteItem, getItem, listItems, loginUser, logoutUser, refreshTokens, registerUser, updateItem } from './client/index.js'
import type { Item, ItemList } from './client/index.js'

export async function walk (): Promise<void> {
  await registerUser({ body: { email: 'a@example.com', password: 'password1', firstName: 'A', lastName: 'B', role: 'viewer' } })
  const { data: auth } = await loginUser({ body: { email: 'a@example.com', password: 'password1' } })
  await refreshTokens({ body: { refreshToken: auth?.refreshToken ?? '' } })
  const page: ItemList | undefined = (await listItems({ query: { page: 1, pageSize: 20 } })).data
  const created: Item | undefined = (await createItem({ body: { name: 'n', description: null } })).data
  const itemId = created?.id ?? page?.data[0]?.id ?? ''
  await getItem({ path: { itemId } })
  await updateItem({ path: { itemId }, body: { status: 'archived' } })
  await deleteItem({ path: { itemId } })
  await logoutUser()
}
`)
  await writeFile(join(directory, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, lib: ['ES2022', 'DOM', 'DOM.Iterable'] },
    include: ['**/*.ts']
  }))
  const { stdout } = await run('npx', ['tsc', '-p', join(directory, 'tsconfig.json')]).catch((error: { stdout: string }) => error)
  t.equal(stdout, '', 'the generated SDK and its use type-check')
})
