// The contract is the whole truth for an item's data: in a scratch copy of the service whose contract gives Item,
// CreateItemRequest and UpdateItemRequest one optional property more, `npm run generate` alone (no hand edit) makes
// it flow through a create, its replay, a get, a list and an edit, on each store.
import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parseDocument } from 'yaml'
import { redisSkip } from '../support/redis.js'

const run = promisify(execFile)
// tap runs every test file in the repository's root.
const ROOT = process.cwd()
// What a checkout holds beside the sources, and none of it is what the scratch copy tests.
const LEFT_OUT = new Set(['.git', 'node_modules', 'dist', 'coverage', '.tap'])
const PROPERTY = 'sku'
const SCHEMAS_GIVEN_IT = ['Item', 'CreateItemRequest', 'UpdateItemRequest']

interface Answer { status: number, body: Record<string, unknown> & { data?: Array<Record<string, unknown>> } }

t.test('a property the contract adds to an item is kept by every store, with nothing written by hand but the contract', { skip: await redisSkip() }, async (t) => {
  const scratch = await mkdtemp(join(tmpdir(), 'items-service-property-'))
  t.teardown(async () => { await rm(scratch, { recursive: true, force: true }) })
  await cp(ROOT, scratch, { recursive: true, filter: (source) => !LEFT_OUT.has(relative(ROOT, source).split('/')[0]!) })
  await symlink(join(ROOT, 'node_modules'), join(scratch, 'node_modules'))

  const contract = parseDocument(await readFile(join(scratch, 'openapi.yaml'), 'utf8'))
  for (const schema of SCHEMAS_GIVEN_IT) {
    contract.setIn(['components', 'schemas', schema, 'properties', PROPERTY], contract.createNode({ type: 'string', maxLength: 32, description: 'The stock-keeping unit.' }))
  }
  await writeFile(join(scratch, 'openapi.yaml'), contract.toString())
  const tsx = join(ROOT, 'node_modules/.bin/tsx')
  await run(tsx, ['scripts/generate.ts'], { cwd: scratch })

  const { stdout } = await run(tsx, ['test/support/property-round-trip.ts', PROPERTY, 'SKU-1', 'SKU-2'], { cwd: scratch, env: { ...process.env, STORE: undefined } })
  const answers = JSON.parse(stdout) as Record<string, Record<string, Answer>>
  for (const store of ['memory', 'redis']) {
    const answer = answers[store]!
    t.same(Object.fromEntries(Object.entries(answer).map(([step, { status }]) => [step, status])),
      { register: 201, create: 201, replay: 201, get: 200, list: 200, edit: 200, getEdited: 200 }, `${store}: every step answered`)
    t.equal(answer.create!.body[PROPERTY], 'SKU-1', `${store}: the create keeps it`)
    t.equal(answer.replay!.body[PROPERTY], 'SKU-1', `${store}: so does its replay`)
    t.equal(answer.get!.body[PROPERTY], 'SKU-1', `${store}: a get reads it`)
    t.equal(answer.list!.body.data?.[0]?.[PROPERTY], 'SKU-1', `${store}: a list reads it`)
    t.equal(answer.edit!.body[PROPERTY], 'SKU-2', `${store}: an edit sets it`)
    t.equal(answer.getEdited!.body[PROPERTY], 'SKU-2', `${store}: and a get reads it edited`)
  }
})
