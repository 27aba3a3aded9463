// The store as an operator starts it: the server process from an environment, on each store, against a Redis with
// and without maxmemory. The room for accounts is derived once every setting is known, and said at start.
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import { newUser } from '../../support/api.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { COMMAND_TIMEOUT_MS } from '../../../src/store/redis/commands.js'
import { redisKeys } from '../../../src/store/redis/keys.js'
import { build, buildTestApp, captureLogs } from '../../support/app.js'
import { failedStart, start } from '../../support/processes.js'
import { until } from '../../support/wait.js'
import { ownRedis, redisKeyPrefix, redisSkip, sentinelDeployment } from '../../support/redis.js'
import { freePort } from '../../../harness/net.js'

const MIB = 1024 * 1024
// The tests are independent (each a store, and its servers, of its own) and mostly wait: three run at a time.
t.jobs = 3
// The budget left to be derived, as an operator who sets none leaves it (the suite's Redis runs set one: a start
// process is given the suite's settings; an undefined variable is not passed on).
const DERIVED = { STORE_CAPACITY_MIB: undefined }

/** The fields of the one log line of the server's whose message is `message`. */
function logged (output: string, message: string): Record<string, unknown> | undefined {
  return output.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((line) => line.msg === message)
}

t.test('memory: the budget is two thirds of the heap in use that sheds writes, half of it kept for floors, said at start', async (t) => {
  const server = await start({ ...DERIVED, STORE: 'memory', MAX_HEAP_USED_MIB: '300' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const budgetBytes = Math.round(300 * MIB * 2 / 3)
  t.match(logged(server.output(), 'room for accounts'), {
    budgetBytes,
    floorBytes: 100 * 1024,
    ceilingBytes: 8 * MIB,
    floorsKeptBytes: Math.floor(budgetBytes / 2),
    sharedBytes: budgetBytes - Math.floor(budgetBytes / 2),
    floors: Math.floor(Math.floor(budgetBytes / 2) / (100 * 1024))
  })
})

const skip = await redisSkip()

t.test('Redis with maxmemory: the budget is two thirds of it, whatever the memory store would take, said at start', { skip }, async (t) => {
  const limited = await ownRedis(t, ['--maxmemory', '96mb'])
  const server = await start({ ...DERIVED, STORE: 'redis', REDIS_URL: limited.url, REDIS_KEY_PREFIX: 'start:' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const budgetBytes = Math.floor(96 * MIB * 2 / 3)
  t.match(logged(server.output(), 'room for accounts'), { budgetBytes, floorsKeptBytes: Math.floor(budgetBytes / 2), floors: Math.floor(Math.floor(budgetBytes / 2) / (100 * 1024)) })
  t.notMatch(server.output(), /no maxmemory/, 'no warning')
})

t.test('Redis without maxmemory or STORE_CAPACITY_MIB: a warning at start, and nothing bounds accounts but Redis', { skip }, async (t) => {
  const unlimited = await ownRedis(t)
  const server = await start({ ...DERIVED, STORE: 'redis', REDIS_URL: unlimited.url, REDIS_KEY_PREFIX: redisKeyPrefix(t) })
  t.teardown(() => { server.process.kill('SIGKILL') })
  t.match(logged(server.output(), 'Redis has no maxmemory and STORE_CAPACITY_MIB is unset: no account\'s floor is guaranteed, and Redis itself is the only bound'), { level: 40 })
  t.match(logged(server.output(), 'room for accounts'), { budgetBytes: null, floors: null }, 'unbounded (JSON says Infinity as null)')
})

t.test('Sentinel: the server started from the environment writes to the primary the sentinels name, each write on a replica before its answer', { skip }, async (t) => {
  const deployment = await sentinelDeployment(t)
  await deployment.settled()
  const keyPrefix = redisKeyPrefix(t)
  const server = await start({ STORE: 'redis', REDIS_URL: deployment.redisUrl, REDIS_SENTINELS: deployment.sentinels, REDIS_SENTINEL_NAME: deployment.name, REDIS_KEY_PREFIX: keyPrefix })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const registered = await fetch(`${server.url}/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(newUser({ role: 'contributor' })) })
  t.equal(registered.status, 201)
  const [primary, ...replicas] = await Promise.all([deployment.primary(), ...deployment.servers].map(async (server) => {
    const redis = new Redis((await server).url)
    const users = await redis.hlen(redisKeys(keyPrefix).users)
    redis.disconnect()
    return users
  }))
  t.equal(primary, 1, 'on the primary')
  t.ok(replicas.filter((users) => users === 1).length >= 2, 'and, when answered, on the primary and a replica at least')
})

t.test('Sentinel: with every sentinel silent when the connection is lost, the instance keeps asking them, and serves again once they answer', { skip }, async (t) => {
  const deployment = await sentinelDeployment(t)
  await deployment.settled()
  const api = await build(t, { STORE: 'redis', REDIS_URL: deployment.redisUrl, REDIS_SENTINELS: deployment.sentinels, REDIS_SENTINEL_NAME: deployment.name, REDIS_KEY_PREFIX: redisKeyPrefix(t) })
  const { accessToken } = await api.register({ role: 'contributor' })
  const primary = new Redis((await deployment.primary()).url)
  t.teardown(() => { primary.disconnect() })
  deployment.signalSentinels('SIGSTOP')
  t.teardown(() => { deployment.signalSentinels('SIGCONT') })
  // Every connection but this one: the instance's, made again through the sentinels.
  await primary.call('CLIENT', 'KILL', 'SKIPME', 'yes', 'TYPE', 'normal')
  await until('the store to be unavailable', () => !api.app.store.available())
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 503, 'unavailable meanwhile')
  // Long enough for every sentinel to have been asked and timed out (1 s each), and the asking begun again.
  await sleep(3 * COMMAND_TIMEOUT_MS + 500)
  deployment.signalSentinels('SIGCONT')
  await until('the store to be available again', () => api.app.store.available())
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200, 'and serving again')
})

t.test('sentinels none of which answers stop the start with one line that names them, without a password', async (t) => {
  const port = await freePort()
  const { code, stderr } = await failedStart({
    STORE: 'redis',
    REDIS_URL: 'rediss://items:data-secret@127.0.0.1',
    REDIS_SENTINELS: `127.0.0.1:${port}`,
    REDIS_SENTINEL_PASSWORD: 'sentinel-secret',
    LOG_LEVEL: 'silent'
  })
  t.equal(code, 1)
  t.match(stderr, new RegExp(`Cannot connect to Redis at the primary 'mymaster' of the sentinels 127\\.0\\.0\\.1:${port}: All sentinels are unreachable`))
  t.notMatch(stderr, /secret/)
})

t.test('Redis of a small maxmemory: heavy accounts are refused 507 by the budget before Redis is full, and a light account writes', { skip }, async (t) => {
  const small = await ownRedis(t, ['--maxmemory', '12mb', '--maxmemory-policy', 'noeviction'])
  const server = await start({ ...DERIVED, STORE: 'redis', REDIS_URL: small.url, REDIS_KEY_PREFIX: 'small:', RATE_LIMIT: 'off', ACCOUNT_CEILING_MIB: '1', REGISTRATION_ROOM_SECONDS: '0' })
  // Ended as an operator ends it, so that what it ran is counted in the coverage of the suite.
  t.teardown(async () => {
    const exited = once(server.process, 'exit')
    server.process.kill('SIGTERM')
    await exited
  })
  const post = async (path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number, json: Record<string, unknown> }> => {
    const response = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
    return { status: response.status, json: await response.json() as Record<string, unknown> }
  }
  const register = async (): Promise<string> => {
    const { status, json } = await post('/v1/auth/register', newUser())
    t.equal(status, 201)
    return String(json.accessToken)
  }
  const light = await register()
  const heavy = { name: 'h'.repeat(200), description: '\u0001'.repeat(10_000) }
  const refusals: string[] = []
  const whose = (status: number, message: string): string =>
    status !== 507 ? `${status} ${message}` : /^Your account/.test(message) ? 'account' : /^The service holds/.test(message) ? 'shared' : message
  for (let account = 0; account < 12 && refusals.at(-1) !== 'shared'; account += 1) {
    const token = await register()
    for (let index = 0; index < 20; index += 1) {
      const { status, json } = await post('/v1/items', heavy, { authorization: `Bearer ${token}` })
      if (status === 201) continue
      refusals.push(whose(status, String(json.message)))
      break
    }
  }
  t.same(new Set(refusals), new Set(['account', 'shared']), 'heavy accounts refused 507 at their ceiling, then for the shared part, before Redis refused anything')
  t.equal(refusals.at(-1), 'shared')
  const created = await post('/v1/items', { name: 'light' }, { authorization: `Bearer ${light}` })
  t.equal(created.status, 201, 'a light account still writes')

  // What the budget does not charge (another program's keys, here) fills Redis: a write is 503 and said at error.
  const redis = new Redis(small.url)
  t.teardown(() => { redis.disconnect() })
  let fillers = 0
  const fill = async (): Promise<void> => {
    for (const size of [64 * 1024, 1024, 64]) {
      while (await redis.set(`filler:${fillers}`, 'f'.repeat(size)).then(() => true, () => false)) fillers += 1
    }
  }
  // A create Redis refuses at its maxmemory is 503, the first said at error (the server writes its line as it
  // answers: it may reach this process a moment after). Room freed meanwhile (keys expiring, the writes' outcomes
  // after 30 s; Redis shrinking a client's buffers) lets a create through as a 201 now and then: filled again
  // before each create, Redis is at its maxmemory again.
  const outOfMemory = 'Redis is at its maxmemory: writes are refused until it has room (docs/operations.md, "Capacity")'
  const statuses = new Set<number>()
  while (logged(server.output(), outOfMemory) === undefined) {
    await fill()
    statuses.add((await post('/v1/items', { name: 'light' }, { authorization: `Bearer ${light}` })).status)
    await sleep(50)
  }
  t.ok(statuses.has(503), 'Redis at its maxmemory: 503')
  t.same([...statuses].filter((status) => status !== 503 && status !== 201), [], 'and never another status (a 201 had room)')
  t.match(logged(server.output(), outOfMemory), { level: 50 }, 'said at error')
})

t.test('expired charges are swept every few seconds while the store answers; a sweep that fails is logged and tried again', async (t) => {
  const store = createMemoryStore()
  let checks = 0
  let sweeps = 0
  const { lines, logStream } = captureLogs()
  await buildTestApp(t, { LOG_LEVEL: 'warn' }, {
    logStream,
    store: {
      ...store,
      // The first sweep finds the store unreachable; the next ones fail.
      available: () => { checks += 1; return checks > 1 },
      idempotencyKeys: {
        claim: store.idempotencyKeys.claim.bind(store.idempotencyKeys),
        release: store.idempotencyKeys.release.bind(store.idempotencyKeys),
        sweep: async () => { sweeps += 1; throw new Error('the sweep broke') }
      }
    }
  })
  await until('a failed sweep to be logged', () => sweeps >= 1 && lines.some((line) => line.includes('the sweep of expired charges failed')))
  t.equal(sweeps, checks - 1, 'none while the store was unreachable, then one each time it answers')
})

t.test('Redis: a refund of an item kept from before items were charged is counted apart; any other refund past what was charged is a drift, said at error', { skip }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const keys = redisKeys(prefix)
  const { lines, logStream } = captureLogs()
  const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix, LOG_LEVEL: 'info' }, { logStream })
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const { accessToken, user } = await api.register()
  const removeUncharged = async (keptBeforeCharges: boolean): Promise<void> => {
    const item = await api.createItem(accessToken)
    // As a catalogue of 1.1.0 kept it: its owner charged nothing for it.
    await redis.hset(keys.accountBytes, user.id, 0)
    await redis.hset(keys.capacity, 'chargedSince', keptBeforeCharges ? Date.parse(item.createdAt) + 1 : 0)
    const deleted = await api.call('deleteItem', { token: accessToken, params: { itemId: item.id } })
    t.equal(deleted.statusCode, 204)
  }
  await removeUncharged(true)
  t.ok(Number(await redis.hget(keys.capacity, 'uncharged')) > 0, 'counted as an item kept before charges')
  t.equal((await api.app.store.capacity()).driftBytes, 0, 'not as a drift')
  await removeUncharged(false)
  const { driftBytes } = await api.app.store.capacity()
  t.ok(driftBytes > 0, 'any other is a drift')
  const drifted = 'the room for accounts drifted: refunds found less charged to their account than they give back (docs/operations.md, "Capacity")'
  const said = (): Record<string, unknown> | undefined => lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.msg === drifted)
  await until('the drift to be logged', () => said() !== undefined)
  t.match(said(), { level: 50, driftBytes, risenBy: driftBytes })
})
