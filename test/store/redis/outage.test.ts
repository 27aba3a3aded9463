// The service on a Redis of the test's own, which the test stops, freezes and starts again mid-traffic.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import { HEARTBEAT } from '../../../src/store/redis/tracking.js'
import { newUser, type Schemas } from '../../support/api.js'
import { build, captureLogs } from '../../support/app.js'
import { until } from '../../support/wait.js'
import { freePort } from '../../../harness/net.js'
import { failedStart } from '../../support/processes.js'
import { ownRedis, redisSkip } from '../../support/redis.js'
import { startReceiver } from '../../../harness/webhook-receiver.js'

const skip = await redisSkip()

t.test('Redis stopped mid-traffic: 503 with Retry-After within a bounded time, not ready, then recovery by itself', { skip }, async (t) => {
  // With a maxmemory, as docs/redis.md asks, and accounts it holds: the start warns of nothing.
  const redis = await ownRedis(t, ['--maxmemory', '64mb'])
  const { lines, logStream } = captureLogs()
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url, MAX_ACCOUNTS: '10', LOG_LEVEL: 'info' }, { logStream })
  const { accessToken } = await api.register()
  await api.createItem(accessToken)

  // Traffic all along: a list request at a time, each one's status and how long it took.
  const seen: Array<{ began: number, status: number, ms: number, retryAfter?: string }> = []
  const stopTraffic = new AbortController()
  const traffic = (async () => {
    while (!stopTraffic.signal.aborted) {
      const began = performance.now()
      const response = await api.call('listItems', { token: accessToken })
      seen.push({ began, status: response.statusCode, ms: performance.now() - began, retryAfter: response.headers['retry-after'] as string | undefined })
      await sleep(10)
    }
  })()
  await until('three requests served', () => seen.length >= 3)
  t.ok(seen.every(({ status }) => status === 200), 'served while Redis is up')

  await redis.stop()
  const stoppedAt = performance.now()
  const sentSinceStopped = (): typeof seen => seen.filter(({ began }) => began > stoppedAt)
  await until('three requests sent since Redis stopped', () => sentSinceStopped().length >= 3)
  const down = sentSinceStopped()
  t.ok(down.every(({ status, retryAfter }) => status === 503 && retryAfter === '2'), `503 with Retry-After while Redis is down: ${JSON.stringify(down.slice(0, 3))}`)
  t.equal((await api.call('checkReadiness')).statusCode, 503, 'not ready')
  t.same((await api.call('registerUser', { body: newUser() })).json(), { code: 'SERVICE_UNAVAILABLE', message: 'The data store is unavailable; try again shortly.' })
  // The outage is logged when the first attempt to reconnect fails.
  await until('the outage to be logged', () => lines.some((line) => line.includes('Redis is unreachable; reconnecting')))

  await redis.start()
  const restartedAt = Date.now()
  while ((await api.call('checkReadiness')).statusCode !== 200) {
    if (Date.now() - restartedAt > 5000) throw new Error('not ready 5 s after Redis came back')
    await sleep(50)
  }
  t.ok(Date.now() - restartedAt < 3000, `ready again ${Date.now() - restartedAt} ms after Redis came back`)
  // This Redis kept nothing (--save ''), as the spec's store does on a restart: the catalogue starts again empty.
  const again = await api.register()
  await api.createItem(again.accessToken)
  t.equal((await api.call('listItems', { token: again.accessToken })).json().pagination.total, 1)
  stopTraffic.abort()
  await traffic
  t.same(seen.filter(({ status }) => status !== 200 && status !== 503 && status !== 401), [], 'never a 500, never anything else')
  t.ok(seen.every(({ ms }) => ms < 1500), `every request answered within 1.5 s (slowest ${Math.max(...seen.map(({ ms }) => ms))} ms)`)
  t.equal(lines.filter((line) => line.includes('Redis is unreachable; reconnecting')).length, 1, 'one warning for the outage')
  t.equal(lines.filter((line) => line.includes('Redis is reachable again')).length, 1)
  const warnings = lines.map((line) => JSON.parse(line) as { level: number, msg: string }).filter(({ level }) => level >= 40)
  // Redis came back empty (it keeps nothing on disk): said once.
  t.same(warnings.map(({ msg }) => msg), ['Redis is unreachable; reconnecting', 'Redis has lost its data (restarted empty, or flushed): the catalogue starts again empty'],
    'those warnings alone, not one a refused request')
})

t.test('a connection Redis drops and the client restores before its first retry fails is logged as an outage too', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const { lines, logStream } = captureLogs()
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url, LOG_LEVEL: 'info' }, { logStream })
  const { accessToken } = await api.register()
  // Redis stays up: only the service's connections end, so the client's first reconnection succeeds, and no
  // attempt ever fails. Requests are refused (503) from the moment the connection is lost until it is back.
  const admin = new Redis(redis.url)
  t.teardown(() => { admin.disconnect() })
  await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  await until('the recovery to be logged', () => lines.some((line) => line.includes('Redis is reachable again')))
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200, 'served again')
  const logged = lines.map((line) => JSON.parse(line) as { level: number, msg: string, reason?: string, err?: { message: string } }).filter(({ msg }) => /^Redis is/.test(msg))
  t.same(logged.map(({ level, msg }) => [level, msg]), [[40, 'Redis is unreachable; reconnecting'], [30, 'Redis is reachable again']], 'the episode, once')
  // Why it began: the close, or the error of a command the kill cut (a heartbeat's), whichever the client told first.
  const [began] = logged
  t.ok(began?.reason === 'the connection was closed' || began?.err?.message !== undefined, 'with why it began')
})

t.test('while Redis is down, the metrics still answer: store down, the last catalogue size and backlog kept', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const target = await startReceiver()
  t.teardown(target.stop)
  const opsPort = await freePort()
  const api = await build(t, {
    STORE: 'redis',
    REDIS_URL: redis.url,
    OPS_PORT: String(opsPort),
    WEBHOOKS: JSON.stringify([{ url: target.url, secret: `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}` }])
  })
  const { accessToken } = await api.register({ role: 'contributor' })
  await api.createItem(accessToken)
  await target.waitFor(1)
  const figures = async (): Promise<string[]> => {
    const response = await fetch(`http://127.0.0.1:${opsPort}/metrics`)
    t.equal(response.status, 200)
    return (await response.text()).split('\n').filter((line) => /^items_service_(store_up|items|webhook_backlog)\b/.test(line))
  }
  const backlog = `items_service_webhook_backlog{subscriber="${target.url}"} 0`
  t.same(await figures(), ['items_service_store_up 1', 'items_service_items 1', backlog])
  await redis.stop()
  // Down, as the app sees it once its connection has closed (the kill reaches the client a moment later).
  const noticed = Date.now() + 5000
  while (api.app.store.available() && Date.now() < noticed) await sleep(10)
  t.same(await figures(), ['items_service_store_up 0', 'items_service_items 1', backlog], 'the last figures the store gave')
})

t.test('a frozen Redis (SIGSTOP) fails requests with 503 after the command timeout, not a hang', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url })
  const { accessToken } = await api.register()
  redis.signal('SIGSTOP')
  t.teardown(() => { redis.signal('SIGCONT') })
  const began = Date.now()
  const response = await api.call('listItems', { token: accessToken })
  const took = Date.now() - began
  t.equal(response.statusCode, 503)
  t.ok(took >= 900 && took < 2000, `answered after ${took} ms`)
  redis.signal('SIGCONT')
  // A freeze past the heartbeat's deadline has the instance make its connection again first.
  while ((await api.call('checkReadiness')).statusCode !== 200) await sleep(20)
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200, 'served again once it thaws')
})

t.test('a frozen Redis (SIGSTOP): readiness turns 503 past the heartbeat\'s deadline, not once the socket closes, and 200 again once it thaws', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const { lines, logStream } = captureLogs()
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url, LOG_LEVEL: 'warn' }, { logStream })
  t.equal((await api.call('checkReadiness')).statusCode, 200)
  redis.signal('SIGSTOP')
  t.teardown(() => { redis.signal('SIGCONT') })
  await until('readiness to turn 503', async () => (await api.call('checkReadiness')).statusCode === 503)
  // The instance finds the connection silent past the deadline and makes it again; the socket of a stalled server
  // stays open a while after (until the client destroys it), and readiness does not wait for its close.
  await until('the connection to be found silent', () => lines.some((line) => line.includes('the Redis main connection has not been heard of within the deadline')))
  t.equal((await api.call('checkReadiness')).statusCode, 503, 'not ready once found silent, its socket still open')
  redis.signal('SIGCONT')
  await until('readiness to turn 200 again', async () => (await api.call('checkReadiness')).statusCode === 200)
  t.pass('ready again')
})

t.test('a write sent to a frozen Redis that thaws after the write\'s deadline is answered 503, and is never applied: a retry neither duplicates nor is taken for a replay', { skip }, async (t) => {
  const redis = await ownRedis(t)
  // No reuse leeway: a refresh that had rotated the token would make the retry a replay, and revoke the session.
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url, REFRESH_REUSE_LEEWAY_SECONDS: '0' })
  const { accessToken, refreshToken } = await api.register()
  // The caller's user and session read once, so that the create's only command while frozen is its write.
  t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200)
  redis.signal('SIGSTOP')
  t.teardown(() => { redis.signal('SIGCONT') })
  const answers = Promise.all([
    api.call('createItem', { token: accessToken, body: { name: 'once' } }),
    api.call('refreshTokens', { body: { refreshToken } })
  ])
  // Past both writes' deadlines (and command timeouts), and well within the time an instance asks for a lost
  // reply: Redis now runs the two scripts it was sent while frozen, after their deadlines, and then tells the
  // instance that neither recorded a reply.
  await sleep(1500)
  redis.signal('SIGCONT')
  const [create, refresh] = await answers
  t.same([create.statusCode, refresh.statusCode], [503, 503], 'not done, and the service knows it')
  // The freeze was a silence past the heartbeat's deadline: the instance may make its connection again once more.
  while ((await api.call('checkReadiness')).statusCode !== 200) await sleep(20)
  await sleep(HEARTBEAT.deadlineMs + HEARTBEAT.intervalMs)
  while ((await api.call('checkReadiness')).statusCode !== 200) await sleep(20)
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 0, 'the create answered 503 was not stored')
  const retried = await api.call('refreshTokens', { body: { refreshToken } })
  t.equal(retried.statusCode, 200, 'the retried refresh is served: its token was never rotated')
  t.equal((await api.call('listItems', { token: retried.json().accessToken })).statusCode, 200, 'and its session lives')
  t.equal((await api.call('createItem', { token: accessToken, body: { name: 'once' } })).statusCode, 201, 'the retried create is stored')
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1, 'once')
})

t.test('items evicted from Redis (maxmemory-policy allkeys-*) are skipped by every page, counted and logged, never a 500', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const { lines, logStream } = captureLogs()
  const api = await build(t, { STORE: 'redis', REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'evicted:', LOG_LEVEL: 'warn' }, { logStream })
  const { accessToken } = await api.register()
  const kept = await api.createItem(accessToken, { name: 'kept' })
  const evicted = await api.createItem(accessToken, { name: 'evicted' })
  const raw = new Redis(redis.url)
  t.teardown(() => { raw.disconnect() })
  await raw.hdel('evicted:items', evicted.id)
  const page = await api.call('listItems', { token: accessToken })
  t.equal(page.statusCode, 200)
  t.same(page.json().data.map((item: { id: string }) => item.id), [kept.id])
  await raw.del('evicted:items')
  t.same((await api.call('listItems', { token: accessToken })).json().data, [], 'the whole hash gone: an empty page')
  const warnings = lines.filter((line) => line.includes('missing from items'))
  t.equal(warnings.length, 1, 'logged once an interval')
  t.match(warnings[0], /"skipped":1/)
})

// A Redis that keeps nothing on disk (the spec's volatile store) comes back from a restart empty, and so does one
// flushed: the accounts' counts are gone with the data, and start again with it.
t.test('Redis restarted empty, or flushed: the instances say so at warn and count it, and the bounds for accounts hold on the data as it is', { skip }, async (t) => {
  const redis = await ownRedis(t)
  const raw = new Redis(redis.url)
  t.teardown(() => { raw.disconnect() })
  const env = { STORE: 'redis', REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'emptied:', ACCOUNT_QUOTA_KIB: '64', LOG_LEVEL: 'warn' }
  const instances = await Promise.all([0, 1].map(async () => {
    const opsPort = await freePort()
    const { lines, logStream } = captureLogs()
    const api = await build(t, { ...env, OPS_PORT: String(opsPort) }, { logStream })
    const lost = async (): Promise<number> => Number(/^items_service_redis_data_lost_total (\S+)$/m.exec(await (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text())?.[1])
    return { api, lines, lost }
  }))
  const heavy = { name: 'heavy', description: 'd'.repeat(10_000) }
  // Until answered otherwise than 503, which a request meets while the connection is made again; bounded, and saying so.
  const answered = async (send: () => ReturnType<typeof instances[number]['api']['call']>, what: string): ReturnType<typeof send> => {
    for (const givesUp = performance.now() + 30_000; ; await sleep(20)) {
      const response = await send()
      if (response.statusCode !== 503) return response
      if (performance.now() > givesUp) throw new Error(`${what}: still 503 after 30 s (${response.body})`)
    }
  }
  // How many heavy items one new account is let keep, created on both instances in turn.
  const kept = async (): Promise<number> => {
    const user = newUser({ role: 'contributor' })
    const { accessToken } = (await answered(async () => await instances[0]!.api.call('registerUser', { body: user }), 'a registration')).json<Schemas['AuthResponse']>()
    for (let made = 0; made < 20; made += 1) {
      const response = await answered(async () => await instances[made % 2]!.api.call('createItem', { token: accessToken, body: heavy }), 'a create')
      if (response.statusCode === 403) return made
      if (response.statusCode !== 201) throw new Error(`a create answered ${response.statusCode} ${response.body}`)
    }
    return Infinity
  }
  const quota = await kept()
  t.equal(quota, 6, 'the quota refuses the account\'s seventh heavy item')
  for (const [emptied, lostBefore] of [['restarted', 0], ['flushed', 1]] as const) {
    if (emptied === 'restarted') {
      await redis.stop()
      await redis.start()
    } else await raw.flushall()
    t.equal(await kept(), quota, `${emptied}: the same quota, on either instance`)
    for (const { api, lines, lost } of instances) {
      t.equal((await api.app.store.usage()).accounts, 1, 'the accounts counted again from nothing')
      // An instance whose writes another's let through finds the loss at its next heartbeat.
      await until('each instance to count it', async () => await lost() === lostBefore + 1)
      t.equal(await lost(), lostBefore + 1, 'each instance counts it')
      t.equal(lines.filter((line) => line.includes('"level":40') && line.includes('Redis has lost its data')).length, lostBefore + 1, 'and says it at warn')
    }
  }
})

t.test('a Redis that cannot be reached stops the start, in one line that keeps the password out', { skip }, async (t) => {
  const redis = await ownRedis(t)
  await redis.stop()
  const { code, stderr } = await failedStart({ STORE: 'redis', REDIS_URL: redis.url.replace('//', '//user:hunter2@') })
  t.equal(code, 1)
  t.equal(stderr, `Cannot connect to Redis at ${redis.url}: connect ECONNREFUSED ${redis.url.replace('redis://', '')}\n`)
})
