// The classes of issues 53 and 62, scaled down, on each store, started from an environment as an operator starts
// it: accounts that fill the store within every limit they are given, in every way a request can make it keep bytes,
// and floods of registrations from many addresses, refuse no light account a write and close registration to no
// newcomer.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { loadConfig } from '../../src/config/config.js'
import { redisKeys } from '../../src/store/redis/keys.js'
import { type Api, newUser, type Schemas } from '../support/api.js'
import { build, testEnvironment } from '../support/app.js'
import { connectRedisStore } from '../../src/store/redis/connection.js'
import { commitScripts } from '../../src/store/redis/commit.js'
import { redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../support/redis.js'
import { redisProxy, TRUSTING_HEARTBEAT } from '../support/redis-proxy.js'

// A description that the heap keeps in 10 000 bytes and its JSON text in 60 000: the heaviest a create can make.
// The tests are independent (each a store of its own) and mostly wait for the pace and the sweep: two run at a time.
t.jobs = 2

const HEAVY = { name: 'h'.repeat(200), description: '\u0001'.repeat(10_000) }
const MAX_ATTACKERS = 12
// What a heavy create is charged at most, with its record (on Redis; less in memory).
const HEAVY_CHARGE = 160_000
const MAX_CREATES_PER_ATTACKER = 40
// An attacker's creates and deletes stay under it; what it sends past it is refused.
const WRITES_PER_WINDOW = 2 * MAX_CREATES_PER_ATTACKER + 10
const PASSWORD = 'correct horse battery staple'
// The pace on registrations: the floors left spread over this time, a 24th of them at once.
const ROOM_SECONDS = 24
const FLOOD = { registrations: 150, addresses: 50 }

const FLOOR_BYTES = 64 * 1024
// Half of 4 MiB kept for 32 floors of 64 KiB (half of each for sessions), half shared; an account may grow to
// 1 MiB, so a couple of heavy accounts use up what is shared. Every limit is on, the write limit low enough for
// attackers to pass it; the per-address registration limit does not stop a flood from many addresses.
const SCALED = {
  STORE_CAPACITY_MIB: '4',
  ACCOUNT_FLOOR_KIB: '64',
  ACCOUNT_SESSIONS_KIB: '32',
  ACCOUNT_CEILING_MIB: '1',
  REGISTRATION_ROOM_SECONDS: String(ROOM_SECONDS),
  RATE_LIMIT: 'on',
  RATE_LIMIT_REGISTER: '1000',
  RATE_LIMIT_LOGIN: '1000',
  RATE_LIMIT_LOGIN_ADDRESS: '1000',
  RATE_LIMIT_REFRESH: '1000',
  RATE_LIMIT_WRITES: String(WRITES_PER_WINDOW),
  // Long enough for the fan-outs below on any machine.
  REFRESH_REUSE_LEEWAY_SECONDS: '60'
}

/** Registers as a client does: a 429 is waited out for its Retry-After, which the pace keeps within its room. */
async function registerPatiently (t: Test, api: Api, body = newUser({ password: PASSWORD })): Promise<Schemas['AuthResponse'] & { email: string }> {
  for (let attempt = 0; ; attempt += 1) {
    const response = await api.call('registerUser', { body })
    if (response.statusCode === 201) return { ...response.json(), email: body.email }
    const retryAfter = Number(response.headers['retry-after'])
    if (response.statusCode !== 429 || !(retryAfter >= 1 && retryAfter <= ROOM_SECONDS) || attempt === 3 * ROOM_SECONDS) {
      t.fail(`a registration answered ${response.statusCode} ${response.body} (Retry-After ${String(response.headers['retry-after'])})`)
      throw new Error('registration refused')
    }
    await sleep(retryAfter * 1000)
  }
}

// What a store keeps beside the ledger that a refused request could leave: on Redis, the writes' replies.
type Leftovers = () => Promise<number>

async function attack (t: Test, store: NodeJS.ProcessEnv, leftovers: Leftovers = async () => 0): Promise<void> {
  const api = await build(t, { ...SCALED, ...store })
  const incumbent = await registerPatiently(t, api)
  const create = async (token: string, key: string, body: { name: string, description?: string } = { name: 'light' }) =>
    await api.call('createItem', { token, body, headers: { 'idempotency-key': key } })
  const kept = await create(incumbent.accessToken, 'incumbent-1')
  t.equal(kept.statusCode, 201)

  // Heavy accounts: each makes heavy creates under keys until refused (its own oldest records pushed out to make
  // room as it goes), and keeps them. They stop once what is left of the shared part holds no heavy item.
  const attackers: Array<{ email: string, accessToken: string, refusal: string, made: string[] }> = []
  const sharedLeft = async (): Promise<number> => {
    const reading = await api.app.store.capacity()
    return reading.budgetBytes - reading.floorsKeptBytes - reading.sharedUsedBytes
  }
  while (attackers.length < MAX_ATTACKERS && await sharedLeft() > HEAVY_CHARGE) {
    const { email, accessToken } = await registerPatiently(t, api)
    const made: string[] = []
    let refusal = ''
    for (let index = 0; index < MAX_CREATES_PER_ATTACKER && refusal === ''; index += 1) {
      const response = await create(accessToken, `attack-${attackers.length}-${index}`, HEAVY)
      if (response.statusCode === 201) made.push(response.json().id)
      else refusal = `${response.statusCode} ${response.json().code} ${response.json().message}`
    }
    attackers.push({ email, accessToken, refusal, made })
  }
  t.ok(attackers.length >= 2 && attackers.length < MAX_ATTACKERS, `${attackers.length} heavy accounts used up the shared part`)
  t.match(attackers[0]!.refusal, /^507 STORE_FULL Your account holds as much/, 'the first was stopped at its ceiling')
  const holdingNothing = await registerPatiently(t, api)
  let past = await create(holdingNothing.accessToken, 'past-its-floor-0', HEAVY)
  for (let index = 1; past.statusCode === 201 && index < 4; index += 1) past = await create(holdingNothing.accessToken, `past-its-floor-${index}`, HEAVY)
  t.same([past.statusCode, past.json().message], [507, 'The service holds as much as it may; nothing more can be added until some is removed.'],
    'heavy creates past a floor are refused once the shared part is used up')
  const full = await api.app.store.capacity()
  t.ok(full.floorsBytes < full.floorsKeptBytes, 'and left the floors kept for newcomers alone')

  // A flood of registrations from many addresses at once: unpaced while more than half of the floors are left, then
  // the pace lets through a 24th of the floors left and one more each time the rate allows; every other is asked
  // to retry, none refused for room.
  const floodBegins = performance.now()
  const beforeFlood = await api.app.store.capacity()
  const flood: Awaited<ReturnType<Api['call']>>[] = []
  for (let wave = 0; wave < FLOOD.registrations / FLOOD.addresses; wave += 1) {
    flood.push(...await Promise.all(Array.from({ length: FLOOD.addresses }, async (_, index) =>
      await api.call('registerUser', { body: newUser(), remoteAddress: `198.51.100.${1 + index}` }))))
  }
  const floodSeconds = (performance.now() - floodBegins) / 1000
  const answered = flood.map((response) => response.statusCode)
  t.same(answered.filter((status) => status !== 201 && status !== 429), [], 'a flood is answered 201 or 429, never 507')
  t.ok(flood.every((response) => response.statusCode !== 429 || (Number(response.headers['retry-after']) >= 1 && response.json().code === 'RATE_LIMITED')), 'each 429 with its Retry-After')
  const floorsLeft = (beforeFlood.floorsKeptBytes - beforeFlood.floorsBytes) / FLOOR_BYTES
  const unpaced = Math.max(0, floorsLeft - beforeFlood.floorsKeptBytes / FLOOR_BYTES / 2)
  const pacedFrom = floorsLeft - unpaced
  const admitted = answered.filter((status) => status === 201).length
  t.ok(admitted <= unpaced + Math.max(1, pacedFrom / 24) + floodSeconds * pacedFrom / ROOM_SECONDS + 1,
    `${admitted} of ${FLOOD.registrations} registered in ${floodSeconds.toFixed(1)} s, within the pace (${unpaced} unpaced)`)
  t.ok(flood.some((response) => response.statusCode === 429), 'the flood met the pace')
  const after = await api.app.store.capacity()
  t.ok(after.floorsBytes < after.floorsKeptBytes, 'floors are left for newcomers')

  // Sessions: three attackers sign in more often than they may keep sessions, and grow their newest to the most
  // a session remembers (32 pairs fanned out from each of its last rotations, 16 tokens replaced before); the
  // sessions that no longer fit their own room end, and the store keeps no more than its budget.
  for (const { email } of attackers.slice(1, 4)) {
    const signIns: string[] = []
    for (let index = 0; index < 25; index += 1) {
      const login = await api.call('loginUser', { body: { email, password: PASSWORD } })
      t.equal(login.statusCode, 200)
      signIns.push(login.json().refreshToken)
    }
    let presented = signIns.at(-1)!
    for (let rotation = 0; rotation < 18; rotation += 1) {
      const next = await api.call('refreshTokens', { body: { refreshToken: presented } })
      t.equal(next.statusCode, 200)
      const fannedOut = rotation >= 16 ? 31 : 0
      for (let pair = 0; pair < fannedOut; pair += 1) {
        t.equal((await api.call('refreshTokens', { body: { refreshToken: presented } })).statusCode, 200, 'a pair fanned out while the leeway lasts')
      }
      presented = next.json().refreshToken
    }
    const oldest = await api.call('refreshTokens', { body: { refreshToken: signIns[5]! } })
    t.equal(oldest.statusCode, 401, 'the attacker\'s own older sessions ended')
  }
  const held = await api.app.store.capacity()
  t.ok(held.heldBytes <= held.budgetBytes, `the store holds ${held.heldBytes} bytes of its ${held.budgetBytes}`)

  // Creates with keys sent past the write limit leave nothing charged.
  const { accessToken: limited } = (await api.call('loginUser', { body: { email: attackers[0]!.email, password: PASSWORD } })).json()
  let answer = 0
  for (let index = 0; index < WRITES_PER_WINDOW && answer !== 429; index += 1) {
    answer = (await create(limited, `limited-${index}`, { name: 'l' })).statusCode
  }
  t.equal(answer, 429, 'the attacker reached its write limit')
  const [before, leftBefore] = [(await api.app.store.capacity()).heldBytes, await leftovers()]
  for (let index = 0; index < 50; index += 1) {
    t.equal((await create(limited, `past-the-limit-${index}`, HEAVY)).statusCode, 429)
  }
  t.equal((await api.app.store.capacity()).heldBytes, before, 'refused claims keep no bytes')
  t.equal(await leftovers(), leftBefore, 'nor anything beside')

  // The light incumbent: a create with a key and its retry, an edit, a sign-in and a refresh.
  const created = await create(incumbent.accessToken, 'incumbent-2')
  t.equal(created.statusCode, 201, 'a create with a key')
  const retry = await create(incumbent.accessToken, 'incumbent-2')
  t.same([retry.statusCode, retry.headers['idempotent-replayed'], retry.json()], [201, 'true', created.json()], 'its retry is replayed')
  const edited = await api.call('updateItem', { token: incumbent.accessToken, params: { itemId: created.json().id }, body: { description: 'd'.repeat(1_000) } })
  t.equal(edited.statusCode, 200, 'an edit that grows the item')
  const login = await api.call('loginUser', { body: { email: incumbent.email, password: PASSWORD } })
  t.equal(login.statusCode, 200, 'a sign-in')
  t.equal((await api.call('listItems', { token: incumbent.accessToken })).statusCode, 200, 'and its first session goes on')
  t.equal((await api.call('refreshTokens', { body: { refreshToken: login.json().refreshToken } })).statusCode, 200, 'a refresh')

  // A newcomer, after the flood: registers (once the pace lets it) and creates.
  const newcomer = await registerPatiently(t, api)
  t.equal((await create(newcomer.accessToken, 'newcomer-1')).statusCode, 201, 'a newcomer registers and creates')
}

const WHAT = 'heavy accounts that use up the shared part, sessions and claims past their limit and a flood of registrations from many addresses refuse no light account a write and no newcomer its registration'

t.test(`memory: ${WHAT}`, async (t) => { await attack(t, { STORE: 'memory' }) })

t.test(`Redis: ${WHAT}`, { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const writeOutcomes = async (): Promise<number> => (await redis.keys(`${redisKeys(prefix).writeOutcome}*`)).length
  await attack(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix }, writeOutcomes)
})

// Issue 62: with the shared part used up, an account within its floor that creates and deletes items under keys
// (as the official client sends every create) was refused once its records filled its floor; a refused create
// pushed out one of its keys all the same.
async function withinTheFloor (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off', REGISTRATION_ROOM_SECONDS: '0' })
  // The shared part used up by heavy accounts.
  for (let refusal = ''; !/The service holds as much/.test(refusal);) {
    const { accessToken } = await api.register()
    for (let index = 0; index < MAX_CREATES_PER_ATTACKER; index += 1) {
      const response = await api.call('createItem', { token: accessToken, body: HEAVY })
      if (response.statusCode !== 201) {
        refusal = response.json().message
        break
      }
    }
  }
  const { accessToken } = await api.register()
  const create = async (key: string, body: { name: string, description?: string } = { name: 'light' }) =>
    await api.call('createItem', { token: accessToken, body, headers: { 'idempotency-key': key } })
  const cycles: number[] = []
  for (let cycle = 0; cycle < 150; cycle += 1) {
    const created = await create(`cycle-${cycle}`)
    cycles.push(created.statusCode)
    if (created.statusCode === 201) await api.call('deleteItem', { token: accessToken, params: { itemId: created.json().id } })
  }
  t.same(cycles.filter((status) => status !== 201), [], '150 keyed creates and deletes, each 201: its oldest records made room')
  const replayed = await create('cycle-149')
  t.same([replayed.statusCode, replayed.headers['idempotent-replayed']], [201, 'true'], 'its newest records kept')
  const edited = await create('edited')
  t.equal((await api.call('updateItem', { token: accessToken, params: { itemId: edited.json().id }, body: { description: 'd'.repeat(2_000) } })).statusCode, 200,
    'an edit that grows an item within the floor makes room too')
  // Each reads the same oldest records to push out; on Redis all but one find them gone when they commit, and
  // make room again.
  const together = await Promise.all(Array.from({ length: 4 }, async (_, index) => (await create(`together-${index}`)).statusCode))
  t.same(together, [201, 201, 201, 201], 'creates sent together each make room')

  // Heavy creates until one is refused: what the shared part has left, then nothing.
  let refused = await create('heavy-0', HEAVY)
  for (let index = 1; refused.statusCode === 201 && index < 10; index += 1) refused = await create(`heavy-${index}`, HEAVY)
  t.same([refused.statusCode, refused.json().code], [507, 'STORE_FULL'], 'a create no record can make room for is refused')
  const held = (await api.app.store.capacity()).heldBytes
  t.equal((await create('heavy-again', HEAVY)).statusCode, 507)
  t.equal((await api.app.store.capacity()).heldBytes, held, 'and changes nothing: no record pushed out for it')
}

const WITHIN = 'every write within an account\'s floor goes through when the shared part is used up: its own oldest records make room, all or none'

t.test(`memory: ${WITHIN}`, async (t) => { await withinTheFloor(t, { STORE: 'memory' }) })

t.test(`Redis: ${WITHIN}`, { skip: await redisSkip() }, async (t) => { await withinTheFloor(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

// Issue 62: an expired record's charge was given back only at its user's next keyed create.
async function expiredRecords (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off', REGISTRATION_ROOM_SECONDS: '0', IDEMPOTENCY_KEY_TTL_SECONDS: '1' })
  const { accessToken } = await api.register()
  const before = (await api.app.store.capacity()).heldBytes
  const created = await api.call('createItem', { token: accessToken, body: { name: 'kept' }, headers: { 'idempotency-key': 'expires' } })
  const withRecord = (await api.app.store.capacity()).heldBytes
  await api.call('deleteItem', { token: accessToken, params: { itemId: created.json().id } })
  const recordAlone = (await api.app.store.capacity()).heldBytes
  t.ok(recordAlone > before && recordAlone < withRecord, 'the record stays charged after its item goes')
  // The sweep runs every 5 s; nothing else is sent meanwhile.
  while ((await api.app.store.capacity()).heldBytes !== before) await sleep(100)
  t.pass('given back once it expired, with no request of anyone\'s')
}

const EXPIRED = 'an expired idempotency record gives its room back within the sweep, with no request'

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

async function pacedOnlyOnceHalfTaken (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const hashing = new CountingHashing(loadConfig(testEnvironment()).passwordHashCost)
  t.teardown(async () => { await hashing.close() })
  // 32 floors; an hour's room, so that nothing the pace holds back comes free while the test runs.
  const api = await build(t, { ...SCALED, ...store, REGISTRATION_ROOM_SECONDS: '3600' }, { hashingProcess: hashing })
  const floors = (await api.app.store.capacity()).floorsKeptBytes / FLOOR_BYTES
  const register = async (): Promise<Awaited<ReturnType<Api['call']>>> => await api.call('registerUser', { body: newUser() })
  const burst = await Promise.all(Array.from({ length: floors / 2 }, register))
  t.same(burst.map((response) => response.statusCode), burst.map(() => 201), `a burst of ${floors / 2} registrations at once, half of the floors: none paced`)
  // Half the floors left: a 24th of them (at least one) at once, then one each hour / 16.
  const paced = [await register(), await register()]
  t.same(paced.map((response) => response.statusCode), [201, 429], 'past half, the pace')
  const refused = paced[1]!
  t.match(refused.json(), { code: 'RATE_LIMITED', message: /Registrations to the whole service are paced/ }, 'its message names the pace')
  t.match(refused.headers.ratelimit, new RegExp(`^"register";r=\\d+;t=\\d+, "registration-pace";r=0;t=${String(refused.headers['retry-after'])}$`), 'and so does RateLimit')
  t.ok(Number(refused.headers['retry-after']) > 60, 'asked to retry once the pace allows one')
  t.equal(hashing.hashed, floors / 2 + 1, 'the registration the pace refused hashed no password')
}

const HALF = 'registrations are paced only once half of the floors are taken, before the password is hashed, the 429 naming the pace'

t.test(`memory: ${HALF}`, async (t) => { await pacedOnlyOnceHalfTaken(t, { STORE: 'memory' }) })

t.test(`Redis: ${HALF}`, { skip: await redisSkip() }, async (t) => { await pacedOnlyOnceHalfTaken(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

// Two instances, the pace's last token: one instance's registration read it, and before it committed, the other's took it.
t.test('Redis: the pace\'s bucket is taken once when two instances register at once: the one that read it before the other took it reads again, and is paced', { skip: await redisSkip() }, async (t) => {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  const keyPrefix = redisKeyPrefix(t)
  const env = { ...SCALED, STORE: 'redis', REDIS_KEY_PREFIX: keyPrefix, REGISTRATION_ROOM_SECONDS: '3600' }
  const store = await connectRedisStore({ url: proxy.url, keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, heartbeat: TRUSTING_HEARTBEAT })
  const behind = await build(t, { ...env, REDIS_URL: proxy.url }, { store })
  const other = await build(t, { ...env, REDIS_URL })
  const floors = (await other.app.store.capacity()).floorsKeptBytes / FLOOR_BYTES
  const burst = await Promise.all(Array.from({ length: floors / 2 }, async () => (await other.call('registerUser', { body: newUser() })).statusCode))
  t.same(burst, burst.map(() => 201), 'half of the floors taken: the pace begins, its bucket one registration')
  let between = 0
  proxy.before(commitScripts.commit, async () => { between = (await other.call('registerUser', { body: newUser() })).statusCode })
  const late = await behind.call('registerUser', { body: newUser() })
  t.same([between, late.statusCode], [201, 429], 'the one committed first is let through; the other, read again, is paced')
  t.equal((await other.app.store.capacity()).accounts, floors / 2 + 1, 'one admitted')
})

async function unpacedForTestRigs (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const api = await build(t, { ...SCALED, ...store, RATE_LIMIT: 'off' })
  const floors = (await api.app.store.capacity()).floorsKeptBytes / FLOOR_BYTES
  const answered: number[] = []
  for (let wave = 0; wave < floors / 16; wave += 1) {
    answered.push(...(await Promise.all(Array.from({ length: 16 }, async () => await api.call('registerUser', { body: newUser() })))).map((response) => response.statusCode))
  }
  t.same(answered, answered.map(() => 201), `${answered.length} registrations, 16 at a time from one address, every floor: none paced`)
  t.equal((await api.call('registerUser', { body: newUser() })).statusCode, 507, 'then the floors are all taken')
}

const OFF = 'RATE_LIMIT=off paces no registration either: a test rig takes every floor, 16 at a time'

t.test(`memory: ${OFF}`, async (t) => { await unpacedForTestRigs(t, { STORE: 'memory' }) })

t.test(`Redis: ${OFF}`, { skip: await redisSkip() }, async (t) => { await unpacedForTestRigs(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })
