// The stall matrix, beside the fault matrix (faults.test.ts): each of an instance's Redis connections black-holed in
// turn, without closing (what a balancer's or a NAT's idle timeout does), while another instance, whose network is
// sound, ends a session. For each: the revoked session is refused within the heartbeat's bound and no request waits
// for the connection; a write made meanwhile is made once, however often it is retried; and the instance goes on
// by itself, on a connection of its own making, and again when the old one comes back (docs/redis.md).
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { HEARTBEAT } from '../../../src/store/redis/tracking.js'
import { type Api, newUser } from '../../support/api.js'
import { build, captureLogs } from '../../support/app.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { redisKeyPrefix, redisSkip } from '../../support/redis.js'
import { type RedisConnection, REDIS_CONNECTIONS, redisProxy } from '../../support/redis-proxy.js'

const skip = await redisSkip()

// Past the bound a revoked session may be accepted, however late the machine's timers: each request is awaited.
const GIVE_UP_MS = 20_000

interface Timed { status: number, ms: number }

async function timed (api: Api, token: string): Promise<Timed> {
  const started = performance.now()
  const response = await api.call('listItems', { token })
  return { status: response.statusCode, ms: performance.now() - started }
}

/** Asks until `wanted` is answered, each answer awaited; every answer on the way. */
async function askUntil (api: Api, token: string, wanted: number): Promise<Timed[]> {
  const answers: Timed[] = []
  const givesUpAt = performance.now() + GIVE_UP_MS
  while (performance.now() < givesUpAt) {
    const answer = await timed(api, token)
    answers.push(answer)
    if (answer.status === wanted) return answers
    await sleep(50)
  }
  return answers
}

async function stallCase (t: Test, stalled: RedisConnection): Promise<void> {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  const prefix = redisKeyPrefix(t)
  const sound = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix })
  const { lines, logStream } = captureLogs()
  const silent = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix, REDIS_URL: proxy.url, LOG_LEVEL: 'warn' }, { logStream })
  const ada = newUser()
  t.equal((await sound.call('registerUser', { body: ada })).statusCode, 201)
  const signIn = async (): Promise<string> => (await sound.call('loginUser', { body: { email: ada.email, password: ada.password } })).json().accessToken
  const [revoked, kept] = [await signIn(), await signIn()]
  // Read until kept at hand: the invalidations of the sign-ins may reach the instance after its first reads.
  for (let read = 0; read < 3; read += 1) {
    t.same([(await timed(silent, revoked)).status, (await timed(silent, kept)).status], [200, 200], 'both sessions served')
    await sleep(100)
  }

  proxy.stall(stalled)
  t.equal((await sound.call('logoutUser', { token: revoked })).statusCode, 204, 'signed out on the sound instance')
  const loggedOutAt = performance.now()
  const answers = await askUntil(silent, revoked, 401)
  const refusedAfterMs = performance.now() - loggedOutAt
  t.equal(answers.at(-1)?.status, 401, `the revoked session is refused (answers in turn: ${answers.map(({ status }) => status).join(' ').replace(/(\d+)( \1)+/g, (run, status: string) => `${status} ×${run.split(' ').length}`)})`)
  if (stalled === 'invalidations') t.equal(answers[0]?.status, 200, 'at first from what the instance kept, not told of the logout')
  t.ok(answers.every(({ status }) => status === 200 || status === 401 || status === 503), 'every answer on the way was 200, 401 or 503, never a hang')
  t.comment(`refused ${Math.round(refusedAfterMs)} ms after the logout (bound ${HEARTBEAT.deadlineMs + HEARTBEAT.intervalMs} ms); the slowest answer took ${Math.round(Math.max(...answers.map(({ ms }) => ms)))} ms`)
  t.match(lines.join(''), new RegExp(`the Redis ${stalled === 'main' ? 'main' : 'invalidation'} connection has not been heard of within the deadline`), 'and the instance says why')

  // A write meanwhile, and its retries under one key until one is answered: one item.
  const key = { 'idempotency-key': `stalled-${stalled}` }
  const { accessToken: writer } = (await sound.call('registerUser', { body: newUser() })).json()
  let created = await silent.call('createItem', { token: writer, body: { name: 'once' }, headers: key })
  for (let tries = 0; created.statusCode !== 201 && tries < 20; tries += 1) {
    await sleep(100)
    created = await silent.call('createItem', { token: writer, body: { name: 'once' }, headers: key })
  }
  t.equal(created.statusCode, 201, 'the instance writes again, on a connection of its own making')
  t.equal((await sound.call('listItems', { token: writer })).json().pagination.total, 1, 'one item, however often it was sent')
  t.equal((await askUntil(silent, kept, 200)).at(-1)?.status, 200, 'the other session is served')

  proxy.resume()
  const again = await signIn()
  t.equal((await timed(silent, again)).status, 200)
  t.equal((await sound.call('logoutUser', { token: again })).statusCode, 204)
  t.equal((await askUntil(silent, again, 401)).at(-1)?.status, 401, 'once the connection is back, a logout reaches the instance as ever')
}

t.test('each Redis connection of an instance black-holed in turn', { skip }, async (t) => {
  for (const stalled of REDIS_CONNECTIONS) await t.test(stalled, async (t) => { await stallCase(t, stalled) })
})
