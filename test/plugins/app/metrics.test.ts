// The operations API on OPS_PORT: metrics in the Prometheus text format, read as Prometheus reads them, over HTTP.
import { readFileSync } from 'node:fs'
import { getHeapStatistics } from 'node:v8'
import t, { type Test } from 'tap'
import { responseValidators } from '../../../generated/operations/response-validator-lookup.js'
import { type Api, newUser } from '../../support/api.js'
import { build, captureLogs } from '../../support/app.js'
import { whileEventLoopOverloaded } from '../../support/wait.js'
import { freePort } from '../../../harness/net.js'
import { redisKeyPrefix, redisSkip } from '../../support/redis.js'
import { subscriberName } from '../../../src/webhooks/subscriptions.js'
import { startReceiver } from '../../../harness/webhook-receiver.js'

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** The samples of a text exposition (what Prometheus parses), comments left out. */
function samplesOf (text: string): Sample[] {
  return text.split('\n').filter((line) => line !== '' && !line.startsWith('#')).map((line) => {
    const [, name = '', labelText = '', value = ''] = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line) ?? []
    const labels = Object.fromEntries([...labelText.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([, key = '', text = '']) => [key, text]))
    return { name, labels, value: Number(value) }
  })
}

/** The value of the one sample of `name` whose labels include `labels`; undefined when there is none. */
function valueOf (samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const matching = samples.filter((sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value))
  return matching.length === 0 ? undefined : matching.reduce((sum, sample) => sum + sample.value, 0)
}

interface Instance {
  api: Api
  lines: string[]
  ops: string
  scrape: (token?: string) => Promise<Sample[]>
}

async function instance (t: Test, env: NodeJS.ProcessEnv = {}): Promise<Instance> {
  const opsPort = await freePort()
  const { lines, logStream } = captureLogs()
  const api = await build(t, { OPS_PORT: String(opsPort), LOG_LEVEL: 'info', ...env }, { logStream })
  const ops = `http://127.0.0.1:${opsPort}`
  const scrape = async (token?: string): Promise<Sample[]> => {
    const response = await fetch(`${ops}/metrics`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } })
    if (response.status !== 200) throw new Error(`GET /metrics answered ${response.status}`)
    return samplesOf(await response.text())
  }
  return { api, lines, ops, scrape }
}

const logged = (lines: string[], message: RegExp): Array<Record<string, unknown>> =>
  lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => message.test(String(line.msg)))

t.test('GET /metrics on OPS_PORT times every request by its contract operation, never by its raw URL', async (t) => {
  const { api, ops } = await instance(t)
  const { accessToken } = await api.register()
  const item = await api.createItem(accessToken)
  await api.call('getItem', { token: accessToken, params: { itemId: item.id } })
  await api.call('getItem', { token: accessToken, params: { itemId: '00000000-0000-4000-8000-000000000000' } })
  const response = await fetch(`${ops}/metrics`)
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
  const text = await response.text()
  t.notMatch(text, item.id, 'no raw URL in a label')
  const samples = samplesOf(text)
  const count = (labels: Record<string, string>): number | undefined => valueOf(samples, 'http_server_request_duration_seconds_count', labels)
  t.equal(count({ method: 'GET', route: '/v1/items/{itemId}', operation: 'getItem', status_code: '200' }), 1)
  t.equal(count({ operation: 'getItem', status_code: '404' }), 1)
  t.equal(count({ method: 'POST', route: '/v1/items', operation: 'createItem', status_code: '201' }), 1)
  t.equal(count({ operation: 'registerUser', status_code: '201' }), 1)
  t.equal(valueOf(samples, 'items_service_items'), 1, 'the catalogue\'s size')
  t.equal(valueOf(samples, 'items_service_store_up'), 1)
  t.ok(valueOf(samples, 'process_cpu_user_seconds_total'), 'the process\'s own metrics')
  t.type(valueOf(samples, 'nodejs_eventloop_lag_p99_seconds'), 'number', 'the event loop\'s delay')
  t.type(valueOf(samples, 'nodejs_eventloop_utilization_ratio'), 'number', 'and utilisation')
  t.equal(valueOf(samples, 'items_service_signin_queue_waiting'), 0)
  t.equal((await api.inject({ method: 'GET', url: '/metrics' })).statusCode, 404, 'never on the API\'s port')
  const unknown = await fetch(`${ops}/v1/items`)
  t.equal(unknown.status, 404, 'the operations port serves only its own API')
})

async function accountMetrics (t: Test, store: NodeJS.ProcessEnv): Promise<void> {
  const { api, scrape } = await instance(t, { ...store, MAX_ACCOUNTS: '2', ACCOUNT_QUOTA_KIB: '64' })
  const part = async (name: string): Promise<number | undefined> => valueOf(await scrape(), 'items_service_accounts', { part: name })
  const refused = async (bound: string): Promise<number | undefined> => valueOf(await scrape(), 'items_service_account_bounds_refused_total', { bound })
  t.same([await part('max'), await part('count'), await part('held_bytes')], [2, 0, 0])
  const { accessToken } = await api.register()
  t.same([await part('count'), await part('held_bytes')], [1, 0], 'an account, keeping nothing yet')
  const created = await api.call('createItem', { token: accessToken, body: { name: 'heavy', description: 'd'.repeat(10_000) } })
  t.equal(await part('held_bytes'), Buffer.byteLength(created.body), 'an item counts its text')
  t.same([await refused('accounts'), await refused('quota')], [undefined, undefined], 'no refusal counted yet')
  await api.register()
  t.equal((await api.call('registerUser', { body: newUser() })).statusCode, 507)
  let answer = 201
  while (answer === 201) answer = (await api.call('createItem', { token: accessToken, body: { name: 'heavy', description: 'd'.repeat(10_000) } })).statusCode
  t.equal(answer, 403)
  t.same([await refused('accounts'), await refused('quota')], [1, 1], 'each refusal counted by its bound')
}

const ACCOUNTS = 'the accounts and the bytes of their quotas they use, and the writes their bounds refuse, by bound'

t.test(`memory: ${ACCOUNTS}`, async (t) => { await accountMetrics(t, { STORE: 'memory' }) })

t.test(`Redis: ${ACCOUNTS}`, { skip: await redisSkip() }, async (t) => { await accountMetrics(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }) })

t.test('a verified token is kept once however it is spelled, logged out or not, and the metrics say how many are kept', async (t) => {
  const { api, ops, scrape } = await instance(t)
  const { accessToken } = await api.register()
  const kept = async (): Promise<number | undefined> => valueOf(await scrape(), 'items_service_verified_tokens')
  t.equal(await kept(), 0)
  // Each spelling its own header, as an attacker who wants a cache entry for each would send them.
  for (let spaces = 1; spaces <= 50; spaces += 1) {
    const response = await api.inject({ method: 'GET', url: '/v1/items', headers: { authorization: `${spaces % 2 === 0 ? 'bearer' : 'Bearer'}${' '.repeat(spaces)}${accessToken}` } })
    t.equal(response.statusCode, 200)
  }
  t.equal(await kept(), 1, 'one token, one entry')
  await api.call('logoutUser', { token: accessToken })
  for (let spaces = 51; spaces <= 100; spaces += 1) {
    const response = await api.inject({ method: 'GET', url: '/v1/items', headers: { authorization: `Bearer${' '.repeat(spaces)}${accessToken}` } })
    t.equal(response.statusCode, 401)
  }
  t.equal(await kept(), 1, 'a logged-out token still one entry')
  const help = (await (await fetch(`${ops}/metrics`)).text()).split('\n').find((line) => line.startsWith('# HELP items_service_verified_tokens '))
  t.match(help, /at most \d+, of at most \d+ bytes each/, 'the bound is stated')
})

t.test('with OPS_TOKEN set, the operations API requires it as a bearer token, read as the public API reads its own', async (t) => {
  const token = 'an-operations-token-for-tests'
  const { ops, scrape } = await instance(t, { OPS_TOKEN: token })
  const validate = responseValidators.getMetrics['401']!
  const refusals = [
    [{}, 'AUTHENTICATION_REQUIRED'], [{ authorization: `Basic ${token}` }, 'AUTHENTICATION_REQUIRED'],
    [{ authorization: 'Bearer not-the-token' }, 'INVALID_TOKEN'], [{ authorization: 'Bearer ' }, 'INVALID_TOKEN'], [{ authorization: `Bearer ${token} ${token}` }, 'INVALID_TOKEN']
  ] as const
  for (const [headers, code] of refusals) {
    const response = await fetch(`${ops}/metrics`, { headers })
    const body: unknown = await response.json()
    t.equal(response.status, 401)
    t.ok(validate(body), `in the operations contract's shape: ${JSON.stringify(validate.errors)}`)
    t.match(body, { code })
  }
  t.ok(valueOf(await scrape(token), 'items_service_store_up'))
  const spelled = await fetch(`${ops}/metrics`, { headers: { authorization: `bearer   ${token}` } })
  t.equal(spelled.status, 200, 'the scheme in any case, followed by any number of spaces')
})

t.test('without OPS_PORT nothing listens and nothing is counted', async (t) => {
  const api = await build(t)
  await api.call('checkLiveness')
  const { metrics } = api.app
  // Whatever a plugin counts with them, nothing is kept.
  metrics.counter<'limit'>({ name: 'a_total', help: 'a', labelNames: ['limit'] }).labels({ limit: 'x' }).inc()
  metrics.gauge({ name: 'b', help: 'b' }).set(1)
  metrics.histogram<'command'>({ name: 'c', help: 'c', labelNames: ['command'] }).observe({ command: 'get' }, 1)
  metrics.requestDurations({ method: 'GET', route: '/health/live', operation: 'checkLiveness', status_code: '200' }).observe(1)
  t.equal((await metrics.exposition()).text, '')
})

t.test('shedding counts each refusal and logs one line an episode, with the figure that caused it', async (t) => {
  const { api, lines, scrape } = await instance(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  const shed = await whileEventLoopOverloaded(api.app, 20, async () =>
    await Promise.all(Array.from({ length: 5 }, async () => (await api.call('checkLiveness')).statusCode)))
  t.same(shed, [503, 503, 503, 503, 503])
  const warnings = logged(lines, /^shedding load/)
  t.equal(warnings.length, 1, 'one line for the episode')
  t.match(warnings[0], { level: 40, reason: 'event_loop_delay', eventLoopDelayMs: Number, maxEventLoopDelayMs: 20 })
  t.equal(valueOf(await scrape(), 'items_service_shed_total', { reason: 'event_loop_delay' }), 5)
})

t.test('a memory shortage sheds writes, logged once however many reads go on in between', async (t) => {
  const { api, lines, scrape } = await instance(t, { MAX_HEAP_USED_MIB: '1024' })
  const { accessToken } = await api.register()
  const actual = process.memoryUsage()
  t.capture(process, 'memoryUsage', () => ({ ...actual, heapUsed: getHeapStatistics().heap_size_limit }))
  while (api.app.memoryUsage().heapUsed < getHeapStatistics().heap_size_limit) await new Promise((resolve) => setTimeout(resolve, 20))
  for (let round = 0; round < 3; round += 1) {
    t.equal((await api.call('createItem', { token: accessToken, body: { name: 'x' } })).statusCode, 503)
    t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200)
  }
  t.match(logged(lines, /^shedding load/), [{ reason: 'heap_used', heapUsedBytes: Number, maxHeapUsedBytes: 1024 * 1024 * 1024 }])
  t.equal(valueOf(await scrape(), 'items_service_shed_total', { reason: 'heap_used' }), 3)
  // The resident size past twice V8's heap limit and 256 MiB, the heap back under its limit: another episode.
  t.capture(process, 'memoryUsage', () => ({ ...actual, rss: 3 * getHeapStatistics().heap_size_limit + 2 ** 30 }))
  while (api.app.memoryUsage().heapUsed >= getHeapStatistics().heap_size_limit) await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal((await api.call('createItem', { token: accessToken, body: { name: 'x' } })).statusCode, 503)
  t.match(logged(lines, /^shedding load/), [{ reason: 'heap_used' }, { reason: 'rss', rssBytes: Number, maxRssBytes: Number }])
  t.capture(process, 'memoryUsage', () => actual)
  while (api.app.memoryUsage().rssBytes > 2 * getHeapStatistics().heap_size_limit) await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal((await api.call('createItem', { token: accessToken, body: { name: 'x' } })).statusCode, 201)
  t.match(logged(lines, /^no longer shedding load/), [{ level: 30, reason: 'rss' }], 'its end is said once')
})

t.test('on Redis, every command is timed', { skip: await redisSkip() }, async (t) => {
  const { api, scrape } = await instance(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) })
  await api.register()
  await scrape()
  const samples = await scrape()
  const timed = (command: string): number => valueOf(samples, 'items_service_redis_command_duration_seconds_count', { command }) ?? 0
  t.ok(timed('eval') + timed('evalsha') >= 2, 'the scripts (eval the first time a connection runs one, evalsha after)')
  t.equal(timed('zcard'), 3, 'and the commands: the users put in order at start, the user\'s sessions its sign-in counts, and the catalogue\'s size, read for the first scrape')
})

t.test('a full sign-in queue counts its refusals and logs one line until it empties', async (t) => {
  const { api, lines, scrape } = await instance(t, { PASSWORD_QUEUE_LIMIT: '1' })
  const statuses = await Promise.all(Array.from({ length: 12 }, async () =>
    (await api.call('loginUser', { body: { email: 'nobody@example.com', password: 'guess-guess' } })).statusCode))
  const refused = statuses.filter((status) => status === 503).length
  t.ok(refused > 0, `${refused} refused`)
  t.match(logged(lines, /^sign-in queue full/), [{ level: 40, passwordQueueLimit: 1 }])
  t.equal(logged(lines, /^the sign-in queue has emptied/).length, 1)
  const samples = await scrape()
  t.equal(valueOf(samples, 'items_service_signin_refused_total'), refused)
  t.equal(valueOf(samples, 'items_service_signin_queue_waiting'), 0)
})

t.test('rate-limit refusals are counted by limit', async (t) => {
  const { api, scrape } = await instance(t, { RATE_LIMIT: 'on', RATE_LIMIT_REFRESH: '2' })
  const statuses = []
  for (let attempt = 0; attempt < 4; attempt += 1) statuses.push((await api.call('refreshTokens', { body: { refreshToken: 'not-a-token' } })).statusCode)
  t.same(statuses, [401, 401, 429, 429])
  t.equal(valueOf(await scrape(), 'items_service_rate_limited_total', { limit: 'refresh' }), 2)
})

t.test('webhook deliveries are counted by subscriber and outcome, timed, and their backlog read from the store', async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  const { api, scrape } = await instance(t, {
    WEBHOOKS: JSON.stringify([{ url: `${target.url}?token=secret-in-query`, secret: `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`, channels: ['items.item.added'] }])
  })
  const { accessToken } = await api.register({ role: 'contributor' })
  await api.createItem(accessToken)
  await target.waitFor(1)
  // Named by its URL without the query and a digest of the query, never the query itself.
  const subscriber = subscriberName(`${target.url}?token=secret-in-query`)
  t.match(subscriber, new RegExp(`^${target.url}\\?query-sha256=[\\w-]{12}$`))
  let samples = await scrape()
  while (valueOf(samples, 'items_service_webhook_deliveries_total', { subscriber, outcome: 'delivered' }) !== 1) samples = await scrape()
  t.equal(valueOf(samples, 'items_service_webhook_delivery_duration_seconds_count', { subscriber }), 1)
  t.equal(valueOf(samples, 'items_service_webhook_backlog', { subscriber }), 0)
  t.notOk(samples.some((sample) => Object.values(sample.labels).some((value) => value.includes('secret-in-query'))), 'the query is never a label')
})

t.test('the operations API listens on loopback whatever HOST is, and warns at start when OPS_HOST opens it without a token', async (t) => {
  const { lines } = await instance(t, { HOST: '0.0.0.0' })
  const listening = logged(lines, /^Operations API at/).map((line) => String(line.msg))
  t.ok(listening.length > 0 && listening.every((line) => /^Operations API at http:\/\/127\.0\.0\.1:\d+$/.test(line)), `on loopback alone: ${listening.join('; ')}`)
  const open = await instance(t, { OPS_HOST: '0.0.0.0' })
  t.match(logged(open.lines, /^OPS_HOST/), [{ level: 40, msg: /OPS_TOKEN is not set/ }])
  t.equal((await fetch(`${open.ops}/metrics`)).status, 200, 'served on every interface, loopback included')
})

t.test('docs/operations.md\'s metrics table names every metric the service exposes, and every part of the accounts\'', { skip: await redisSkip() }, async (t) => {
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  const webhooks = JSON.stringify([{ url: receiver.url, secret: `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}` }])
  const { ops } = await instance(t, { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t), WEBHOOKS: webhooks })
  const exposition = await (await fetch(`${ops}/metrics`)).text()
  const table = readFileSync('docs/operations.md', 'utf8').split('\n').filter((line) => line.startsWith('| `'))
  const documented = new Set(table.flatMap((line) => [.../^\| `(\w+)`/.exec(line) ?? []].slice(1)))
  const exposed = [...new Set([...exposition.matchAll(/^# TYPE (items_service_\w+) /gm)].map(([, name = '']) => name))]
  t.ok(exposed.length >= 19, `${exposed.length} metrics of the service's own`)
  for (const name of exposed) t.ok(documented.has(name), `${name} has its row`)
  const accountsRow = table.find((line) => line.startsWith('| `items_service_accounts`')) ?? ''
  for (const [, part = ''] of exposition.matchAll(/^items_service_accounts\{part="(\w+)"\}/gm)) {
    t.match(accountsRow, `\`${part}\``, `its part ${part} is named`)
  }
})
