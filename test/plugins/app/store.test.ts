// The store as an operator starts it: the server process from an environment, on each store, against a Redis with
// and without maxmemory. The bounds for accounts are said at start.
import { once } from 'node:events'
import { readFile } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { newUser } from '../../support/api.js'
import { createMemoryStore } from '../../../src/store/memory/index.js'
import { COMMAND_TIMEOUT_MS } from '../../../src/store/redis/commands.js'
import { redisKeys } from '../../../src/store/redis/keys.js'
import { build, buildTestApp, captureLogs, productionHashCost } from '../../support/app.js'
import { failedStart, start } from '../../support/processes.js'
import { until } from '../../support/wait.js'
import { ownRedis, redisKeyPrefix, redisSkip, sentinelDeployment } from '../../support/redis.js'
import { freePort } from '../../../harness/net.js'

// The tests are independent (each a store, and its servers, of its own) and mostly wait: three run at a time.
t.jobs = 3

/** A server started from the environment, ended when the test ends as an operator ends it, so that what it ran is counted in the suite's coverage. */
async function started (t: Test, env: NodeJS.ProcessEnv): Promise<Awaited<ReturnType<typeof start>>> {
  const server = await start(env)
  t.teardown(async () => {
    const exited = once(server.process, 'exit')
    server.process.kill('SIGTERM')
    await exited
  })
  return server
}

/** The fields of the one log line of the server's whose message is `message`. */
function logged (output: string, message: string): Record<string, unknown> | undefined {
  return output.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((line) => line.msg === message)
}

const MIB = 1024 * 1024
const PRODUCTION = { NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32), CONTRACT_STRICT_RESPONSES: '0', ...productionHashCost }

t.test('memory: the sizing rule against the heap in use that sheds writes: its figures said at start; bounds that do not fit said with the settings to change, and a production start stopped', async (t) => {
  const fitting = await started(t, { STORE: 'memory', MAX_HEAP_USED_MIB: '300', MAX_ACCOUNTS: '50', ACCOUNT_QUOTA_KIB: '128' })
  const said = logged(fitting.output(), 'bounds for accounts')
  t.match(said, { maxAccounts: 50, quotaBytes: 128 * 1024, accounts: 0, budgetBytes: 300 * MIB, fits: true })
  t.ok(Number(said?.neededBytes) < 300 * MIB && Number(said?.accountsThatFit) >= 50, 'fifty accounts fit, with room for more')
  const tooMany = String(Number(said?.accountsThatFit) + 1)
  const warned = await started(t, { STORE: 'memory', MAX_HEAP_USED_MIB: '300', MAX_ACCOUNTS: tooMany, ACCOUNT_QUOTA_KIB: '128' })
  const advice = new RegExp(`^the bounds for accounts need \\d+ bytes at worst, past the store's ${300 * MIB} \\(MAX_HEAP_USED_MIB\\): set MAX_ACCOUNTS to at most ${String(said?.accountsThatFit)}, or lower ACCOUNT_QUOTA_KIB`)
  const warning = warned.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as { level: number, msg: string }).find((line) => advice.test(line.msg))
  t.match(warning, { level: 40 }, 'one account more: said at warn, outside production')
  const stopped = await failedStart({ ...PRODUCTION, STORE: 'memory', MAX_HEAP_USED_MIB: '300', MAX_ACCOUNTS: tooMany, ACCOUNT_QUOTA_KIB: '128' })
  t.equal(stopped.code, 1, 'in production, the start stops')
  t.match(stopped.stderr, new RegExp(`^Invalid configuration: ${advice.source.slice(1)}`), 'in one line that says what to change')
  const sandboxed = await failedStart({ ...PRODUCTION, STORE: 'memory', MAX_HEAP_USED_MIB: '300', MAX_ACCOUNTS: '50', ACCOUNT_QUOTA_KIB: '128', SANDBOXES: 'on', OPS_PORT: '0', SANDBOX_LIMIT: '1000' })
  t.match(sandboxed.stderr, /set MAX_ACCOUNTS to at most 0, or lower ACCOUNT_QUOTA_KIB, MAX_IDEMPOTENCY_KEYS_PER_USER or MAX_SESSIONS_PER_USER, SANDBOX_LIMIT or SANDBOX_ACCOUNTS, or give the store more/,
    'sandboxes too: their worst case counts, and their settings are named')
})

const skip = await redisSkip()

t.test('Redis: the sizing rule against maxmemory, for every instance alike; without maxmemory, a warning that nothing checks it', { skip }, async (t) => {
  const limited = await ownRedis(t, ['--maxmemory', '96mb', '--maxmemory-policy', 'noeviction'])
  const env = { STORE: 'redis', REDIS_URL: limited.url, REDIS_KEY_PREFIX: redisKeyPrefix(t), ACCOUNT_QUOTA_KIB: '128', MAX_ACCOUNTS: '10' }
  const fitting = await started(t, env)
  t.match(logged(fitting.output(), 'bounds for accounts'), { maxAccounts: 10, budgetBytes: 96 * MIB, fits: true })
  const stopped = await failedStart({ ...env, ...PRODUCTION, MAX_ACCOUNTS: '1000' })
  t.equal(stopped.code, 1)
  t.match(stopped.stderr, /^Invalid configuration: the bounds for accounts need \d+ bytes at worst, past the store's 100663296 \(Redis's maxmemory\): set MAX_ACCOUNTS to at most \d+/)
  // No maxmemory; a CONFIG renamed away, so that none can be read.
  for (const settings of [['--maxmemory', '0'], ['--rename-command', 'CONFIG', '']]) {
    const unchecked = await started(t, { ...env, REDIS_URL: (await ownRedis(t, settings)).url })
    t.match(logged(unchecked.output(), 'Redis has no maxmemory: nothing checks that the bounds for accounts fit it, and a full Redis stops every write; set maxmemory and maxmemory-policy noeviction (docs/redis.md)'), { level: 40 }, settings.join(' '))
  }
})

t.test('compose.yaml: its MAX_ACCOUNTS fits its Redis\'s maxmemory, so that its instances start in production as compose starts them', { skip }, async (t) => {
  const compose = await readFile('compose.yaml', 'utf8')
  const defaultOf = (variable: string): string => String(new RegExp(`\\$\\{${variable}:-([^}]+)\\}`).exec(compose)?.[1])
  const redis = await ownRedis(t, ['--maxmemory', defaultOf('REDIS_MAXMEMORY'), '--maxmemory-policy', 'noeviction'])
  const server = await started(t, { ...PRODUCTION, STORE: 'redis', REDIS_URL: redis.url, REDIS_KEY_PREFIX: redisKeyPrefix(t), RATE_LIMIT: 'on', MAX_ACCOUNTS: defaultOf('MAX_ACCOUNTS') })
  t.match(logged(server.output(), 'bounds for accounts'), { maxAccounts: Number(defaultOf('MAX_ACCOUNTS')), budgetBytes: 1024 * MIB, fits: true })
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

t.test('Redis at its maxmemory (noeviction): a write is 503, said at error, and never another status', { skip }, async (t) => {
  const small = await ownRedis(t, ['--maxmemory', '12mb', '--maxmemory-policy', 'noeviction'])
  // A few accounts: the deployment sized for its Redis, which other keys then fill.
  const server = await start({ STORE: 'redis', REDIS_URL: small.url, REDIS_KEY_PREFIX: 'small:', RATE_LIMIT: 'off', MAX_ACCOUNTS: '2' })
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
  const { status, json } = await post('/v1/auth/register', newUser())
  t.equal(status, 201)
  const light = String(json.accessToken)
  const created = await post('/v1/items', { name: 'light' }, { authorization: `Bearer ${light}` })
  t.equal(created.status, 201, 'a light account still writes')

  // What the deployment was not sized for (another program's keys, here) fills Redis: a write is 503 and said at error.
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
  const outOfMemory = 'Redis is at its maxmemory: writes are refused until it has room (docs/capacity.md)'
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

t.test('expired idempotency records are swept every few seconds while the store answers; a sweep that fails is logged and tried again', async (t) => {
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
      idempotencyKeys: { sweep: async () => { sweeps += 1; throw new Error('the sweep broke') } }
    }
  })
  await until('a failed sweep to be logged', () => sweeps >= 1 && lines.some((line) => line.includes('the sweep of expired idempotency records failed')))
  t.equal(sweeps, checks - 1, 'none while the store was unreachable, then one each time it answers')
})
