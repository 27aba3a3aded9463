import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { loadConfig } from '../../../src/config/config.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { type Schemas } from '../../support/api.js'
import { build, buildTestApp, captureLogs } from '../../support/app.js'
import { failedStart } from '../../support/processes.js'

const ada = { email: 'ada@example.com', password: 'correct horse battery staple', firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }
const ID = '7a0c1e2d-3f4b-4a5c-8d6e-9f0a1b2c3d4e'
const grace = { email: 'grace@example.com', password: 'another good password', firstName: 'Grace', lastName: 'Hopper', role: 'viewer' }

function seedFile (t: Test, contents: unknown): string {
  const file = join(t.testdir(), 'seed.json')
  writeFileSync(file, typeof contents === 'string' ? contents : JSON.stringify(contents))
  return file
}

t.test('SEED_FILE: users and items loaded before the server is ready, as the API would have made them', async (t) => {
  const file = seedFile(t, {
    users: [ada, grace],
    items: [
      { owner: 'ADA@example.com', name: 'Difference engine' },
      { owner: ada.email, name: 'Analytical engine', description: 'Never finished.', status: 'archived' }
    ]
  })
  const api = await build(t, { SEED_FILE: file })
  const signedIn = await api.call('loginUser', { body: { email: grace.email, password: grace.password } })
  t.equal(signedIn.statusCode, 200, 'a seeded user signs in with the password of the file')
  const owner = (await api.call('loginUser', { body: { email: ada.email, password: ada.password } })).json()
  const listed = (await api.call('listItems', { token: signedIn.json().accessToken })).json()
  t.match(listed, {
    data: [
      { name: 'Difference engine', description: null, status: 'active', contributorId: owner.user.id },
      { name: 'Analytical engine', description: 'Never finished.', status: 'archived', contributorId: owner.user.id }
    ],
    pagination: { total: 2 }
  }, 'items in the order given, owned by the user named')
  t.equal((await api.call('registerUser', { body: { ...ada, email: 'Ada@Example.COM' } })).statusCode, 409, 'seeded emails are taken')
})

t.test('the fixtures file docs/testing.md shows is test/fixtures.json, and loads as it says, with the ids it gives', async (t) => {
  const fixtures = readFileSync('test/fixtures.json', 'utf8')
  t.ok(readFileSync('docs/testing.md', 'utf8').includes(`\`\`\`json\n${fixtures}\`\`\``), 'docs/testing.md shows the file as it is')
  const api = await build(t, { SEED_FILE: 'test/fixtures.json' })
  const signedIn = await api.call('loginUser', { body: { email: 'grace@example.com', password: 'another good password' } })
  const token = signedIn.json().accessToken
  const listed = (await api.call('listItems', { token })).json()
  t.same(listed.data.map((item: Schemas['Item']) => [item.name, item.status]), [['Difference engine', 'active'], ['Analytical engine', 'archived']])
  const known = await api.call('getItem', { token, params: { itemId: '0b5f6c7e-3c1a-4d2b-9e8f-1a2b3c4d5e6f' } })
  t.match(known.json(), { name: 'Difference engine', contributorId: '5d9f1c2e-8a7b-4c3d-9e2f-6a5b4c3d2e1f' }, 'an item and its owner by the ids the file gives')
  t.match(listed.data[1], { id: /^[0-9a-f]{8}-[0-9a-f]{4}-4/ }, 'an entry without one gets a random id')
})

t.test('ids in the file are read as the API reads uuids: in any case, with or without urn:uuid:, and kept canonical', async (t) => {
  const USER_ID = '5d9f1c2e-8a7b-4c3d-9e2f-6a5b4c3d2e1f'
  const file = seedFile(t, {
    users: [{ ...ada, id: `urn:uuid:${USER_ID.toUpperCase()}` }, grace],
    items: [{ owner: ada.email, name: 'Difference engine', id: `URN:UUID:${ID.toUpperCase()}` }]
  })
  const api = await build(t, { SEED_FILE: file })
  const signedIn = (await api.call('loginUser', { body: { email: ada.email, password: ada.password } })).json()
  t.equal(signedIn.user.id, USER_ID, 'the user has the canonical id')
  const token = signedIn.accessToken
  t.match((await api.call('getItem', { token, params: { itemId: ID } })).json(), { id: ID, contributorId: USER_ID })
  t.equal((await api.call('listItems', { token, query: { contributorId: USER_ID } })).json().pagination.total, 1, 'found by its owner')
  t.equal((await api.call('deleteItem', { token, params: { itemId: ID.toUpperCase() } })).statusCode, 204, 'its owner deletes it')
})

t.test('one id given twice, in two spellings, stops the start', async (t) => {
  const file = seedFile(t, {
    users: [ada],
    items: [{ owner: ada.email, name: 'first', id: ID }, { owner: ada.email, name: 'second', id: `urn:uuid:${ID.toUpperCase()}` }]
  })
  await t.rejects(build(t, { SEED_FILE: file }), /items\[1\]\.id: is given already, by items\[0\]/)
})

t.test('a bad seed file stops the start with one line naming the entry', async (t) => {
  const bad: Array<[unknown, RegExp]> = [
    ['{', /: is not valid JSON \(at line 1, column 2\)$/],
    ['{"users": [{"password": SuperSecret}]}', /: is not valid JSON \(at line 1, column 25\)$/],
    [[], /: must be an object with users and items/],
    [{ users: [], extra: [] }, /: has unknown field\(s\) extra$/],
    [{ users: {} }, /: users: must be a list$/],
    [{ users: [ada, { ...grace, email: 'not an email' }] }, /: users\[1\]\.email: must match format "email"$/],
    [{ users: [ada, { ...grace, password: 'short' }] }, /: users\[1\]\.password: must NOT have fewer than 8 characters$/],
    [{ users: [ada, { ...grace, email: 'ADA@example.com' }] }, /: users\[1\]\.email: is listed already, as users\[0\]$/],
    [{ users: ['x'] }, /: users\[0\]: must be an object$/],
    [{ users: [{ ...ada, id: 'ada' }] }, /: users\[0\]\.id: must be a uuid$/],
    [{ users: [{ ...ada, id: ID }], items: [{ owner: ada.email, name: 'n', id: ID.toUpperCase() }] }, /: items\[0\]\.id: is given already, by users\[0\]$/],
    [{ users: [ada], items: ['x'] }, /: items\[0\]: must be an object$/],
    [{ users: [ada], items: [{ owner: ada.email }] }, /: items\[0\]\.name: must have required property 'name'$/],
    [{ users: [ada], items: [{ owner: ada.email, name: 'n', colour: 'red' }] }, /: items\[0\]\.colour: must NOT have additional properties$/],
    [{ users: [ada], items: [{ owner: ada.email, name: 'n', status: 'gone' }] }, /: items\[0\]\.status: must be one of active, archived$/],
    [{ users: [ada, grace], items: [{ owner: grace.email, name: 'n' }] }, /: items\[0\]\.owner: must be the email of a contributor in users$/],
    [{ users: [ada], items: [{ owner: 'nobody@example.com', name: 'n' }] }, /: items\[0\]\.owner: must be the email of a contributor/],
    [{ items: [{ owner: 42, name: 'n' }] }, /: items\[0\]\.owner: must be the email of a contributor/],
    [{ users: [ada], items: [{ owner: ada.email, name: 'one' }, { owner: ada.email, name: 'two' }] }, /: items\[1\]: its owner already owns as many items as MAX_ITEMS_PER_USER allows$/]
  ]
  for (const [contents, message] of bad) {
    const file = seedFile(t, contents)
    await t.rejects(buildTestApp(t, { STORE: 'memory', SEED_FILE: file, MAX_ITEMS_PER_USER: '1' }),
      { name: 'SeedError', message: new RegExp(`^Cannot load SEED_FILE ${file}${message.source}`) }, JSON.stringify(contents))
  }
  const missing = join(t.testdir(), 'missing.json')
  await t.rejects(buildTestApp(t, { STORE: 'memory', SEED_FILE: missing }),
    { name: 'SeedError', message: `Cannot load SEED_FILE ${missing}: Error: ENOENT: no such file or directory, open '${missing}'` })
  const { code, stderr } = await failedStart({ SEED_FILE: seedFile(t, { users: [{ ...ada, role: 'admin' }] }) })
  t.equal(code, 1)
  t.match(stderr.trim(), /^Cannot load SEED_FILE \S+: users\[0\]\.role: must be equal to one of the allowed values$/, 'one line')
  t.throws(() => loadConfig({ NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32), SEED_FILE: 'seed.json' }),
    { message: 'Invalid configuration: SEED_FILE is for development and test, not production' })
})

t.test('a second start on a store that kept the first\'s seed (Redis) starts, skipping the users and items seeded before', async (t) => {
  const store = createMemoryStore()
  const file = seedFile(t, { users: [ada, grace], items: [{ owner: ada.email, name: 'Difference engine' }] })
  await build(t, { SEED_FILE: file }, { store })
  const { lines, logStream } = captureLogs()
  const again = await build(t, { SEED_FILE: file, LOG_LEVEL: 'info' }, { store, logStream })
  const { accessToken } = (await again.call('loginUser', { body: { email: ada.email, password: ada.password } })).json()
  t.equal((await again.call('listItems', { token: accessToken })).json().pagination.total, 1, 'the item once')
  t.match(lines.join(''), /"users":2,"items":1,"msg":"SEED_FILE: users registered before \(by an earlier start\) skipped, with their items"/)
})

t.test('a seed never overwrites: an id that belongs to someone or something else stops the start in one line naming the entry', async (t) => {
  const store = createMemoryStore()
  const api = await build(t, {}, { store })
  const owner = await api.register()
  const item = await api.createItem(owner.accessToken)
  const cases: Array<[unknown, RegExp]> = [
    [{ users: [{ ...ada, id: owner.user.id }] }, /: users\[0\]\.id: belongs to another user already$/],
    [{ users: [{ ...ada, email: owner.user.email, id: ID }] }, /: users\[0\]\.id: the email is registered already, with another id$/],
    [{ users: [ada], items: [{ owner: ada.email, name: 'Renamed', id: item.id }] }, /: items\[0\]\.id: belongs to another item already$/]
  ]
  for (const [contents, message] of cases) {
    const file = seedFile(t, contents)
    await t.rejects(buildTestApp(t, { SEED_FILE: file }, { store }),
      { name: 'SeedError', message: new RegExp(`^Cannot load SEED_FILE ${file}${message.source}`) }, JSON.stringify(contents))
  }
  const full = seedFile(t, { users: [ada, grace] })
  await t.rejects(buildTestApp(t, { SEED_FILE: full }, { store: createMemoryStore({ accounts: { accounts: 1, quotaBytes: 65_536 } }) }),
    { name: 'SeedError', message: `Cannot load SEED_FILE ${full}: users[1]: the store has no room for it (the store holds the 1 accounts it admits)` },
    'a user the store has no room for is named, with what the store says')
  const heavy = seedFile(t, { users: [ada], items: [{ owner: ada.email, name: 'a', description: 'd'.repeat(10_000) }, { owner: ada.email, name: 'b', description: 'd'.repeat(10_000) }] })
  await t.rejects(buildTestApp(t, { SEED_FILE: heavy }, { store: createMemoryStore({ accounts: { accounts: 1, quotaBytes: 16_384 } }) }),
    { name: 'SeedError', message: `Cannot load SEED_FILE ${heavy}: items[1]: the store has no room for it (the account would keep more than its quota of 16384 bytes)` },
    'and so is an item past its owner\'s quota')
  t.same((await api.call('getItem', { token: owner.accessToken, params: { itemId: item.id } })).json(), item, 'the item is as it was')
  t.equal((await api.call('loginUser', { body: { email: owner.user.email, password: 'correct horse battery staple' } })).statusCode, 200, 'its owner signs in as before')
})

t.test('a second start skips what a first seeded with the same ids, and stops when a seeded owner\'s item id is another\'s', async (t) => {
  const store = createMemoryStore()
  const seeded = { users: [{ ...ada, id: ID }], items: [{ owner: ada.email, name: 'Difference engine', id: '0b5f6c7e-3c1a-4d2b-9e8f-1a2b3c4d5e6f' }] }
  await build(t, { SEED_FILE: seedFile(t, seeded) }, { store })
  const again = await build(t, { SEED_FILE: seedFile(t, seeded) }, { store })
  const { accessToken } = (await again.call('loginUser', { body: { email: ada.email, password: ada.password } })).json()
  t.equal((await again.call('listItems', { token: accessToken })).json().pagination.total, 1, 'the item once')
  const other = await again.register()
  const othersItem = await again.createItem(other.accessToken)
  const file = seedFile(t, { ...seeded, items: [{ owner: ada.email, name: 'n', id: othersItem.id }] })
  await t.rejects(buildTestApp(t, { SEED_FILE: file }, { store }),
    { name: 'SeedError', message: `Cannot load SEED_FILE ${file}: items[0].id: belongs to another item already` })
})

t.test('an item whose owner\'s email a start before registered, not as a contributor, stops the start naming the entry', async (t) => {
  const store = createMemoryStore()
  await (await build(t, {}, { store })).register({ email: ada.email, role: 'viewer' })
  const file = seedFile(t, { users: [ada], items: [{ owner: ada.email, name: 'Difference engine' }] })
  await t.rejects(buildTestApp(t, { SEED_FILE: file }, { store }),
    { name: 'SeedError', message: `Cannot load SEED_FILE ${file}: items[0].owner: the email is registered already, not as a contributor` })
})
