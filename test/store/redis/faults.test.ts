// Every write of the Redis store, through a proxy that cuts the connection before the write reaches Redis, loses its
// reply, holds its reply past the command timeout, or loses its reply and then keeps Redis out of reach: each
// answer is the one docs/redis.md promises (201/200/204 for a write that was made, 503 for one that was not, 504
// when the service cannot learn which in time), and nothing is made twice or lost after a 2xx.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { RedisClock } from '../../../src/store/redis/clock.js'
import { connectRedisStore, scripts } from '../../../src/store/redis/connection.js'
import { writeDeadline } from '../../../src/store/redis/commands.js'
import { Change } from '../../../src/store/redis/commit.js'
import { redisKeys, type RedisKeys } from '../../../src/store/redis/keys.js'
import { RedisWrites } from '../../../src/store/redis/writes.js'
import { type Api, newUser } from '../../support/api.js'
import { build } from '../../support/app.js'
import { until } from '../../support/wait.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { ownRedis, redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../../support/redis.js'
import { ANY_COMMIT, answerTo, FAULT_OUTCOMES, type Marked, REDIS_FAULTS, type RedisFault, redisProxy, TRUSTING_HEARTBEAT } from '../../support/redis-proxy.js'

const skip = await redisSkip()
const OUTCOME_WITHIN_MS = 1000

interface Faulty {
  api: Api
  keys: RedisKeys
  /** Redis itself, past the proxy. */
  raw: Redis
  arm: (script: Marked, fault: RedisFault) => void
  /** Lets Redis be reached again, and waits until the service has reconnected. */
  up: () => Promise<void>
}

async function faulty (t: Test, env: NodeJS.ProcessEnv = {}, url = REDIS_URL): Promise<Faulty> {
  const proxy = await redisProxy(url)
  t.teardown(proxy.close)
  const keyPrefix = redisKeyPrefix(t)
  const store = await connectRedisStore({ url: proxy.url, keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, outcomeWithinMs: OUTCOME_WITHIN_MS, heartbeat: TRUSTING_HEARTBEAT })
  // With a handler for each channel, every item write appends its event to the outbox stream, which nothing here
  // consumes: its length counts the events made.
  const ignore = (): void => {}
  const api = await build(t, env, { store, subscribers: { 'items.item.added': [ignore], 'items.item.edited': [ignore], 'items.item.removed': [ignore] } })
  const raw = new Redis(url)
  t.teardown(() => { raw.disconnect() })
  const up = async (): Promise<void> => {
    proxy.up()
    await until('the store to be available', () => store.available())
  }
  return { api, keys: redisKeys(keyPrefix), raw, arm: proxy.arm, up }
}

// The sessions' keys, but the instances' heartbeats kept among them (tracking.ts).
const sessionKeys = async (raw: Redis, keys: RedisKeys): Promise<string[]> =>
  (await raw.keys(`${keys.session}*`)).filter((key) => !key.startsWith(keys.sessionHeartbeat))

interface WriteCase {
  script: Marked
  /** The write's answer when it was made and its reply came. */
  status: number
  /** Sets up what the write needs; returns the write, sent once (and again for a retry). */
  prepare: (f: Faulty) => Promise<() => Promise<LightMyRequestResponse>>
  /** How many times the write is in the store (its item, user, session, ...), 0 or 1 expected. */
  count: (f: Faulty) => Promise<number>
  /** The answer a retry of the write gets once it was made (the client's way to resolve a 504). */
  retried: number
}

const item = { name: 'once', description: 'made exactly once' }

const cases: Readonly<Record<string, WriteCase>> = {
  registerUser: {
    script: ANY_COMMIT,
    status: 201,
    prepare: async ({ api }) => {
      const body = newUser({ email: 'lost-reply@example.com' })
      return async () => await api.call('registerUser', { body })
    },
    count: async ({ raw, keys }) => await raw.hlen(keys.users),
    retried: 409
  },
  loginUser: {
    script: ANY_COMMIT,
    status: 200,
    prepare: async ({ api, raw, keys }) => {
      const body = newUser()
      const { user } = await api.register(body)
      await raw.del(keys.userSessions + user.id)
      return async () => await api.call('loginUser', { body: { email: body.email, password: body.password } })
    },
    count: async ({ raw, keys }) => {
      const [userSessions = ''] = await raw.keys(`${keys.userSessions}*`)
      return userSessions === '' ? 0 : await raw.zcard(userSessions)
    },
    // Each sign-in opens a session of its own: a retry opens another, as it would without any fault.
    retried: 200
  },
  refreshTokens: {
    script: ANY_COMMIT,
    status: 200,
    prepare: async ({ api }) => {
      const { refreshToken } = await api.register()
      return async () => await api.call('refreshTokens', { body: { refreshToken } })
    },
    // A session's `rotated` is when its token was last rotated: 0 until it is.
    count: async ({ raw, keys }) => {
      const [session = ''] = await sessionKeys(raw, keys)
      return await raw.hget(session, 'rotated') === '0' ? 0 : 1
    },
    // Within the reuse leeway, the same refresh token gets a working pair again.
    retried: 200
  },
  logoutUser: {
    script: ANY_COMMIT,
    status: 204,
    prepare: async ({ api }) => {
      const { accessToken } = await api.register()
      return async () => await api.call('logoutUser', { token: accessToken })
    },
    count: async ({ raw, keys }) => (await sessionKeys(raw, keys)).length === 0 ? 1 : 0,
    retried: 401
  },
  createItem: {
    script: ANY_COMMIT,
    status: 201,
    prepare: async ({ api }) => {
      const { accessToken } = await api.register({ role: 'contributor' })
      // Loads the script into Redis, so that the write is sent by its SHA-1.
      await api.createItem(accessToken, { name: 'first' })
      return async () => await api.call('createItem', { token: accessToken, body: item, headers: { 'idempotency-key': 'the-create' } })
    },
    count: async ({ raw, keys }) => (await raw.hvals(keys.items)).filter((json) => json.includes(item.description)).length,
    retried: 201
  },
  updateItem: {
    script: ANY_COMMIT,
    status: 200,
    prepare: async ({ api }) => {
      const { accessToken } = await api.register({ role: 'contributor' })
      const { id } = await api.createItem(accessToken)
      return async () => await api.call('updateItem', { token: accessToken, params: { itemId: id }, body: item })
    },
    count: async ({ raw, keys }) => (await raw.hvals(keys.items)).filter((json) => json.includes(item.description)).length,
    retried: 200
  },
  deleteItem: {
    script: ANY_COMMIT,
    status: 204,
    prepare: async ({ api }) => {
      const { accessToken } = await api.register({ role: 'contributor' })
      const { id } = await api.createItem(accessToken)
      return async () => await api.call('deleteItem', { token: accessToken, params: { itemId: id } })
    },
    count: async ({ raw, keys }) => await raw.hlen(keys.items) === 0 ? 1 : 0,
    // The item is gone: a client that re-sends a delete after a lost answer takes 404 as done.
    retried: 404
  }
}

// A retry answered 503 is sent again after a pause, a few times: a 503 that lasts is the test's failure, shown with
// its body.
const RETRIES_ON_503 = 20
const RETRY_AFTER_503_MS = 100

/** Each of the cases `names`, through each fault, on the Redis at `url`. */
async function faultMatrix (t: Test, names: readonly string[], url?: string): Promise<void> {
  for (const name of names) {
    const write = cases[name]!
    await t.test(name, async (t) => {
      for (const fault of REDIS_FAULTS) await t.test(`${fault}: ${FAULT_OUTCOMES[fault]}`, async (t) => { await faultCase(t, name, write, fault, url) })
    })
  }
}

async function faultCase (t: Test, name: string, write: WriteCase, fault: RedisFault, url?: string): Promise<void> {
  const f = await faulty(t, {}, url)
  const send = await write.prepare(f)
  const eventsBefore = await f.raw.xlen(f.keys.outbox)
  f.arm(write.script, fault)
  const response = await send()
  const outcome = FAULT_OUTCOMES[fault]
  t.equal(response.statusCode, answerTo(outcome, write.status), `answered ${response.body}`)
  if (outcome === 'unknown') {
    t.equal(response.json().code, 'OUTCOME_UNKNOWN')
    await f.up()
  }
  if (outcome === 'not made') t.equal(response.headers['retry-after'], '2', 'and when to try again')
  t.equal(await write.count(f), outcome === 'not made' ? 0 : 1, outcome === 'not made' ? 'nothing was made' : 'made once')
  const itemWrite = name.startsWith('createItem') || name === 'updateItem' || name === 'deleteItem'
  if (itemWrite) t.equal(await f.raw.xlen(f.keys.outbox) - eventsBefore, outcome === 'not made' ? 0 : 1, 'an event with each item write made, and none without')
  // The client's next step: a retry of what was not made makes it once; of what was (or may have been), the
  // documented answer, and nothing made twice. A retry answered 503 did nothing, and is sent again once Redis is
  // reachable, as a client does: the connection a fault cut may not be made again yet.
  let retry = await send()
  for (let tries = 1; retry.statusCode === 503 && tries < RETRIES_ON_503; tries += 1) {
    await f.up()
    await sleep(RETRY_AFTER_503_MS)
    retry = await send()
  }
  const retriedStatus = outcome === 'not made' ? write.status : write.retried
  t.equal(retry.statusCode, retriedStatus, `the retry: ${retry.body}`)
  if (name !== 'loginUser') t.equal(await write.count(f), 1, 'made once in all')
  if (name === 'createItem' && outcome !== 'not made') t.equal(retry.headers['idempotent-replayed'], 'true', 'the retry is answered from the record')
}

t.test('every write, through every fault', { skip }, async (t) => { await faultMatrix(t, Object.keys(cases)) })

t.test('on a Redis that asks for a password, in a database other than 0: the same answers, and every key in that database', { skip }, async (t) => {
  const password = 'a-test-password'
  const own = await ownRedis(t, ['--requirepass', password])
  await faultMatrix(t, ['registerUser', 'createItem', 'deleteItem'], `${own.url.replace('//', `//:${password}@`)}/8`)
  const raw = new Redis(own.url, { password })
  t.teardown(() => { raw.disconnect() })
  t.equal(await raw.dbsize(), 0, 'nothing in database 0')
  t.ok(await raw.select(8).then(async () => await raw.dbsize()) > 0, 'the writes are in database 8')
})

t.test('a write while Redis is known to be out of reach is 503 at once: nothing was sent', { skip }, async (t) => {
  const f = await faulty(t)
  const { accessToken } = await f.api.register({ role: 'contributor' })
  await f.api.createItem(accessToken)
  f.arm(ANY_COMMIT, 'drop-reply-then-down')
  t.equal((await f.api.call('createItem', { token: accessToken, body: item })).statusCode, 504)
  // A logout counts against no rate limit: its write is the first thing it sends.
  const refused = await f.api.call('logoutUser', { token: accessToken })
  t.same([refused.statusCode, refused.json().code], [503, 'SERVICE_UNAVAILABLE'])
  await f.up()
  t.equal((await f.api.call('listItems', { token: accessToken })).statusCode, 200, 'the session was never ended')
})

t.test('a write that Redis answers with an error is not taken for a lost reply: the error stands', { skip }, async (t) => {
  const redis = new Redis(REDIS_URL, { scripts })
  t.teardown(() => { redis.disconnect() })
  const clock = new RedisClock(redis)
  await clock.check()
  const writes = new RedisWrites(redis, clock, redisKeys(redisKeyPrefix(t)).writeOutcome)
  // A bug (a wrong command) is a ReplyError, as it was; a write past its deadline a StoreUnavailableError (503).
  await t.rejects(writes.run(async () => await redis.call('NO-SUCH-COMMAND')), { name: 'ReplyError' })
  const change = new Change().write('SET', 'late', 'v')
  await t.rejects(writes.run(async (_deadline, outcomeKey) => await redis.commit(...change.keys('limit'), writeDeadline(0, 0), outcomeKey, -1, 0, change.structure, ...change.values)),
    { name: 'StoreUnavailableError', message: /DEADLINE/ })
  // A client that is not connected sends nothing: the request that got past the store's check just before is 503.
  const unconnected = new Redis(REDIS_URL, { scripts, lazyConnect: true })
  let sent = false
  await t.rejects(new RedisWrites(unconnected, clock, 'never:').run(async () => { sent = true }), { name: 'StoreUnavailableError', message: /nothing was sent/ })
  t.equal(sent, false)
})
