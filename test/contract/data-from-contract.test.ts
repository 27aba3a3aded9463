// The contract is the whole truth for an item's data: in a scratch copy of the service whose contract gives Item,
// CreateItemRequest and UpdateItemRequest optional properties more (a text, and a list of texts), `npm run generate`
// alone (no hand edit) makes each flow through a create, its replay, a get, a list and an edit, on each store, counts
// each against its account's quota, and makes the fuzz test's generator make valid requests of them.
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
// Each property added, its schema, and its value at a create and at an edit.
const PROPERTIES = {
  sku: { schema: { type: 'string', maxLength: 32, description: 'The stock-keeping unit.' }, created: 'SKU-1', edited: 'SKU-2' },
  tags: { schema: { type: 'array', maxItems: 10, items: { type: 'string', maxLength: 32 }, description: 'Words to find it by.' }, created: ['engine', 'calculator'], edited: [] }
}
const SCHEMAS_GIVEN_THEM = ['Item', 'CreateItemRequest', 'UpdateItemRequest']
// Run in the scratch copy: how many of the fuzz test's valid create bodies the contract refuses.
const GENERATED_BODIES_CHECK = `import fc from 'fast-check'
import { validators } from './generated/validators.js'
import { routes } from './generated/routes.js'
import { valid } from './test/support/arbitraries.js'
const route = routes.find((route) => route.operationId === 'createItem')
const bodies = fc.sample(valid(route.schema.body), { numRuns: 200, seed: 1 })
console.log(JSON.stringify({ refused: bodies.filter((body) => !validators.createItem.body(body)).length, withTags: bodies.filter((body) => Array.isArray(body.tags) && body.tags.length > 0).length }))
`

interface Answer { status: number, body: Record<string, unknown> & { data?: Array<Record<string, unknown>> } }

t.test('a property the contract adds to an item is kept by every store, with nothing written by hand but the contract', { skip: await redisSkip() }, async (t) => {
  const scratch = await mkdtemp(join(tmpdir(), 'items-service-property-'))
  t.teardown(async () => { await rm(scratch, { recursive: true, force: true }) })
  await cp(ROOT, scratch, { recursive: true, filter: (source) => !LEFT_OUT.has(relative(ROOT, source).split('/')[0]!) })
  await symlink(join(ROOT, 'node_modules'), join(scratch, 'node_modules'))

  const contract = parseDocument(await readFile(join(scratch, 'openapi.yaml'), 'utf8'))
  for (const schema of SCHEMAS_GIVEN_THEM) {
    for (const [property, { schema: added }] of Object.entries(PROPERTIES)) contract.setIn(['components', 'schemas', schema, 'properties', property], contract.createNode(added))
  }
  await writeFile(join(scratch, 'openapi.yaml'), contract.toString())
  const tsx = join(ROOT, 'node_modules/.bin/tsx')
  await run(tsx, ['scripts/generate.ts'], { cwd: scratch })

  for (const [property, { created, edited }] of Object.entries(PROPERTIES)) {
    const { stdout } = await run(tsx, ['test/support/property-round-trip.ts', property, JSON.stringify(created), JSON.stringify(edited)], { cwd: scratch, env: { ...process.env, STORE: undefined } })
    const answers = JSON.parse(stdout) as Record<string, Record<string, Answer>>
    for (const store of ['memory', 'redis']) {
      const answer = answers[store]!
      const { 'made-true': sending, 'made-false': notSending, ...steps } = answer
      t.same(Object.fromEntries(Object.entries(steps).map(([step, { status }]) => [step, status])),
        { register: 201, create: 201, replay: 201, get: 200, list: 200, edit: 200, getEdited: 200, 'filler-true': 201, 'filler-false': 201 }, `${property}, ${store}: every step answered`)
      t.ok(sending!.status > 0 && sending!.status < notSending!.status, `${property}, ${store}: an account sending it is refused sooner by its quota (${sending!.status} creates against ${notSending!.status})`)
      t.same(answer.create!.body[property], created, `${property}, ${store}: the create keeps it`)
      t.same(answer.replay!.body[property], created, `${property}, ${store}: so does its replay`)
      t.same(answer.get!.body[property], created, `${property}, ${store}: a get reads it`)
      t.same(answer.list!.body.data?.[0]?.[property], created, `${property}, ${store}: a list reads it`)
      t.same(answer.edit!.body[property], edited, `${property}, ${store}: an edit sets it`)
      t.same(answer.getEdited!.body[property], edited, `${property}, ${store}: and a get reads it edited`)
    }
  }
  await writeFile(join(scratch, 'generated-bodies-check.ts'), GENERATED_BODIES_CHECK)
  const { stdout } = await run(tsx, ['generated-bodies-check.ts'], { cwd: scratch })
  const { refused, withTags } = JSON.parse(stdout) as { refused: number, withTags: number }
  t.equal(refused, 0, 'the fuzz test\'s generator makes valid creates of the grown contract')
  t.ok(withTags > 0, `and fills the list in (${withTags} of 200 with tags)`)
})
