// The promises of the quotas (src/domain/quotas.ts), on each store, started from an environment as an operator
// starts it: accounts that fill their own quotas in every way a request can make the store keep bytes refuse no
// other account a write; an account's own forgotten keys never lock out its keyed creates; a flood of registrations
// from many addresses fills MAX_ACCOUNTS no faster than a day allows, and a test rig (RATE_LIMIT=off) is never refused
// short of MAX_ACCOUNTS.
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { loadConfig } from '../../src/config/config.js'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { type Api, newUser } from '../support/api.js'
import { build, testEnvironment } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

t.jobs = 2

const QUOTA_BYTES = 64 * 1024
// Every limit on but the writes' and the addresses' own, high enough for the tests' bursts.
const SCALED = {
  ACCOUNT_QUOTA_KIB: String(QUOTA_BYTES / 1024),
  RATE_LIMIT: 'on',
  RATE_LIMIT_REGISTER: '1000',
  RATE_LIMIT_LOGIN: '1000',
  RATE_LIMIT_LOGIN_ADDRESS: '1000',
  RATE_LIMIT_REFRESH: '1000',
  RATE_LIMIT_WRITES: '1000'
}
// About 10 KB of text: six fit a quota.
const HEAVY = { name: 'h'.repeat(200), description: 'd'.repeat(10_000) }
// What a text counts against its account's quota.
const bytesOf = (body: string): number => Buffer.byteLength(body)

type Answer = Awaited<ReturnType<Api['call']>>
const create = async (api: Api, token: string, body: { name: string, description?: string }, key?: string): Promise<Answer> =>
  await api.call('createItem', { token, body, ...(key === undefined ? {} : { headers: { 'idempotency-key': key } }) })

async function neighbours (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store })
  const light = await api.register()
  // Heavy accounts, each filling its quota: unkeyed creates, then a keyed one, then an edit that grows an item.
  for (let heavy = 0; heavy < 3; heavy += 1) {
    const { accessToken } = await api.register()
    const small = await create(api, accessToken, { name: 'small' })
    const made = [await create(api, accessToken, HEAVY)]
    while (made.at(-1)!.statusCode === 201) made.push(await create(api, accessToken, HEAVY))
    const refused = made.pop()!
    t.equal(made.length, Math.floor((QUOTA_BYTES - bytesOf(small.body)) / bytesOf(made[0]!.body)), `heavy account ${heavy}: as many items as its quota holds`)
    t.same([refused.statusCode, refused.json()], [403, {
      code: 'ACCOUNT_QUOTA_EXCEEDED',
      message: `This would take your account past the ${QUOTA_BYTES} bytes of items the service keeps for each; delete or shorten some items first.`
    }])
    const held = await api.app.store.usage()
    t.equal((await create(api, accessToken, HEAVY, `past-${heavy}`)).statusCode, 403, 'a keyed create past it too')
    // Three bytes a character in UTF-8.
    t.equal((await api.call('updateItem', { token: accessToken, params: { itemId: small.json().id }, body: { description: '\u20ac'.repeat(10_000) } })).statusCode, 403,
      'and an edit that grows an item past it')
    t.same(await api.app.store.usage(), held, 'refused writes change nothing')
    t.equal((await api.call('deleteItem', { token: accessToken, params: { itemId: made[0]!.json().id } })).statusCode, 204)
    t.equal((await create(api, accessToken, HEAVY)).statusCode, 201, 'a delete gives its room back')
  }
  // The light account and a newcomer write as if the heavy ones were not there.
  const created = await create(api, light.accessToken, { name: 'light' }, 'light-1')
  t.equal(created.statusCode, 201, 'a keyed create')
  const retry = await create(api, light.accessToken, { name: 'light' }, 'light-1')
  t.same([retry.statusCode, retry.headers['idempotent-replayed'], retry.json()], [201, 'true', created.json()], 'its retry replayed')
  t.equal((await api.call('updateItem', { token: light.accessToken, params: { itemId: created.json().id }, body: { description: 'd'.repeat(1_000) } })).statusCode, 200, 'an edit that grows it')
  const newcomer = await api.register()
  t.equal((await create(api, newcomer.accessToken, HEAVY)).statusCode, 201, 'a newcomer registers and creates')
}

const NEIGHBOURS = 'accounts that fill their quotas refuse no other account\'s write, and a write past a quota is 403 ACCOUNT_QUOTA_EXCEEDED that changes nothing'

t.test(`memory: ${NEIGHBOURS}`, async (t) => { await neighbours(t, { STORE: 'memory' }) })

t.test(`Redis: ${NEIGHBOURS}`, { skip: await redisSkip() }, async (t) => { await neighbours(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

// The official client sends every create under a key: an account that creates and deletes keeps one record of each
// create for a day, more than its quota holds.
async function ownRecords (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off' })
  const { accessToken } = await api.register()
  const medium = { name: 'medium', description: 'd'.repeat(1_000) }
  const cycles: number[] = []
  let recordsBytes = 0
  for (let cycle = 0; cycle < 150; cycle += 1) {
    const created = await create(api, accessToken, medium, `cycle-${cycle}`)
    cycles.push(created.statusCode)
    recordsBytes += bytesOf(created.body)
    if (created.statusCode === 201) await api.call('deleteItem', { token: accessToken, params: { itemId: created.json().id } })
  }
  t.ok(recordsBytes > 2 * QUOTA_BYTES, `the records of 150 creates (${recordsBytes} bytes) pass the quota twice`)
  t.same(cycles.filter((status) => status !== 201), [], '150 keyed creates and deletes, each 201: its oldest records made room')
  const replayed = await create(api, accessToken, medium, 'cycle-149')
  t.same([replayed.statusCode, replayed.headers['idempotent-replayed']], [201, 'true'], 'its newest record kept')
  t.equal((await create(api, accessToken, medium, 'cycle-0')).headers['idempotent-replayed'], undefined, 'its oldest forgotten: a create again')
  const edited = await create(api, accessToken, medium, 'edited')
  t.equal((await api.call('updateItem', { token: accessToken, params: { itemId: edited.json().id }, body: { description: 'd'.repeat(5_000) } })).statusCode, 200,
    'an edit that grows an item makes room too')
  // Each reads the same oldest records to forget; on Redis all but one find them gone when they commit, and read again.
  const together = await Promise.all(Array.from({ length: 4 }, async (_, index) => (await create(api, accessToken, medium, `together-${index}`)).statusCode))
  t.same(together, [201, 201, 201, 201], 'creates sent together each make room')
  // Heavy keyed creates until one is refused: what its items hold leaves no room that records could make.
  let refused = await create(api, accessToken, HEAVY, 'heavy-0')
  for (let index = 1; refused.statusCode === 201 && index < 10; index += 1) refused = await create(api, accessToken, HEAVY, `heavy-${index}`)
  t.same([refused.statusCode, refused.json().code], [403, 'ACCOUNT_QUOTA_EXCEEDED'], 'a create no record can make room for is refused')
  const held = await api.app.store.usage()
  t.equal((await create(api, accessToken, HEAVY, 'heavy-again')).statusCode, 403)
  t.same(await api.app.store.usage(), held, 'and changes nothing: no record forgotten for it')
}

const OWN_RECORDS = 'an account\'s own oldest idempotency records make room for its writes, all or none: its forgotten keys never lock out its keyed creates'

t.test(`memory: ${OWN_RECORDS}`, async (t) => { await ownRecords(t, { STORE: 'memory' }) })

t.test(`Redis: ${OWN_RECORDS}`, { skip: await redisSkip() }, async (t) => { await ownRecords(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

async function expiredRecords (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off', IDEMPOTENCY_KEY_TTL_SECONDS: '1' })
  const { accessToken } = await api.register()
  const before = (await api.app.store.usage()).heldBytes
  const created = await create(api, accessToken, { name: 'kept' }, 'expires')
  t.equal((await api.app.store.usage()).heldBytes, before + 2 * bytesOf(created.body), 'an item and its record, each its text')
  await api.call('deleteItem', { token: accessToken, params: { itemId: created.json().id } })
  t.equal((await api.app.store.usage()).heldBytes, before + bytesOf(created.body), 'the record stays counted after its item goes')
  // The sweep runs every 5 s; nothing else is sent meanwhile.
  while ((await api.app.store.usage()).heldBytes !== before) await sleep(100)
  t.pass('given back once it expired, with no request of anyone\'s')
}

const EXPIRED = 'an expired idempotency record gives its bytes back within the sweep, with no request'

t.test(`memory: ${EXPIRED}`, async (t) => { await expiredRecords(t, { STORE: 'memory' }) })

t.test(`Redis: ${EXPIRED}`, { skip: await redisSkip() }, async (t) => { await expiredRecords(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

/** A real hashing process that counts the passwords it hashes. */
class CountingHashing extends HashingProcess {
  hashed = 0

  override async hash (password: string): Promise<string> {
    this.hashed += 1
    return await super.hash(password)
  }
}

// 50 accounts: 2 registrations an hour for the whole service.
async function flood (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const hashing = new CountingHashing(loadConfig(testEnvironment()).passwordHashCost)
  t.teardown(async () => { await hashing.close() })
  const api = await build(t, { ...SCALED, ...store, MAX_ACCOUNTS: '50' }, { hashingProcess: hashing })
  const answers = await Promise.all(Array.from({ length: 20 }, async (_, index) =>
    await api.call('registerUser', { body: newUser(), remoteAddress: `198.51.100.${1 + index}` })))
  t.equal(answers.filter((response) => response.statusCode === 201).length, 2, 'a flood from 20 addresses: 2 registered, a 25th of MAX_ACCOUNTS')
  const refused = answers.filter((response) => response.statusCode !== 201)
  t.same(refused.map((response) => response.statusCode), refused.map(() => 429), 'every other 429')
  const [first] = refused
  t.match(first!.json(), { code: 'RATE_LIMITED', message: 'Too many registrations to the service; try again later.' })
  t.match(first!.headers['ratelimit-policy'], /"registrations";q=2;w=3600/, 'the policy names the limit')
  t.ok(Number(first!.headers['retry-after']) > 60, 'and asks to retry once its hour has passed')
  t.equal(hashing.hashed, 2, 'a registration refused hashed no password')
}

const FLOOD = 'a flood of registrations from many addresses registers a 25th of MAX_ACCOUNTS an hour, before any password is hashed'

t.test(`memory: ${FLOOD}`, async (t) => { await flood(t, { STORE: 'memory' }) })

t.test(`Redis: ${FLOOD}`, { skip: await redisSkip() }, async (t) => { await flood(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

async function testRig (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off', MAX_ACCOUNTS: '48' })
  const answered: number[] = []
  for (let wave = 0; wave < 3; wave += 1) {
    answered.push(...(await Promise.all(Array.from({ length: 16 }, async () => await api.call('registerUser', { body: newUser() })))).map((response) => response.statusCode))
  }
  t.same(answered, answered.map(() => 201), '48 registrations, 16 at a time from one address: none refused')
  const full = await api.call('registerUser', { body: newUser() })
  t.same([full.statusCode, full.json()], [507, { code: 'STORE_FULL', message: 'The service holds the 48 accounts it admits; no more can register.' }], 'then MAX_ACCOUNTS is reached')
  t.equal((await api.app.store.usage()).accounts, 48)
}

const RIG = 'RATE_LIMIT=off refuses no registration short of MAX_ACCOUNTS: a test rig registers 16 at a time; past it, 507 STORE_FULL'

t.test(`memory: ${RIG}`, async (t) => { await testRig(t, { STORE: 'memory' }) })

t.test(`Redis: ${RIG}`, { skip: await redisSkip() }, async (t) => { await testRig(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

t.test('Redis: two instances registering at once admit MAX_ACCOUNTS in all, not one more', { skip: await redisSkip() }, async (t) => {
  const env = { ...SCALED, STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: redisKeyPrefix(t), RATE_LIMIT: 'off', MAX_ACCOUNTS: '20' }
  const instances = [await build(t, env), await build(t, env)]
  const answers = await Promise.all(Array.from({ length: 40 }, async (_, index) => (await instances[index % 2]!.call('registerUser', { body: newUser() })).statusCode))
  t.same([answers.filter((status) => status === 201).length, answers.filter((status) => status === 507).length], [20, 20])
  t.equal((await instances[0]!.app.store.usage()).accounts, 20)
})
