// npm run bench: the built service and three bare-Fastify baselines, each pinned to core 0 while autocannon runs
// on core 1, in one run. Prints requests/s, p50/p99 latency, errors and the ratio to the baseline, and writes
// bench-results/bench.json and bench-results/bench.md. Every scenario runs once per round, beside the baseline it is
// compared with; each figure is the median of the rounds, each ratio the median of the ratios within each round.
// BENCH_DURATION (seconds, default 5) sets one measurement's length, BENCH_ROUNDS (default 3) the rounds. The list
// and the get also run against a second instance of the service with STORE=redis (the Redis at REDIS_URL, under
// a key prefix of the run's own, deleted afterwards), compared with bare Fastify and ioredis serving the same keys
// (the store's texts as they are, and, as the usual setup, parsed and serialized again); and the bytes Redis
// takes per item are measured at 100 000 items. The create and the edit on Redis are compared with bare Fastify and
// ioredis writing the item by one EVALSHA, and with the usual setup in front of it (@fastify/jwt, @fastify/rate-limit
// counting in Redis), each with the CPU microseconds and the commands Redis spends per request and the first's ratio
// to the bare anchor's; the edits on Redis spread over items, one a connection; the create on Redis runs again with
// an Idempotency-Key of its own on each request, as the official client sends every create. The create also runs
// against an instance with one webhook subscriber (a receiver in this process),
// compared with the create with none, with the events it delivers a second.
import { randomUUID } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'
import { startReceiver } from '../../harness/webhook-receiver.js'
import { median } from '../statistics.js'
import { redisBytesPerItem } from './redis-memory.js'
import { type Server, start, startReplica, startService, stop } from './servers.js'
import { call, JWT_SECRET, serviceEnv } from './service.js'
import { FLOOD_SIGN_INS, floodSignIns } from './sign-in-flood.js'

const DURATION = Number(process.env.BENCH_DURATION ?? 5)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const CONNECTIONS = 10

interface Load {
  url: string
  method?: 'GET' | 'POST' | 'PATCH'
  token?: string
  body?: unknown
  connections?: number
  /** Each connection's own path in place of the url's (an edit of one item a connection), in turn. */
  paths?: readonly string[]
  /** Each request with an `Idempotency-Key` of its own, as the official client sends every create. */
  keyed?: boolean
}

interface Measurement {
  requestsPerSecond: number
  /** Requests answered, the warm-up's included. */
  requests: number
  p50: number
  p99: number
  non2xx: number
  errors: number
}

async function measure (load: Load, duration = DURATION): Promise<Measurement> {
  const options = {
    url: load.url,
    method: load.method ?? 'GET',
    connections: load.connections ?? CONNECTIONS,
    headers: {
      'content-type': 'application/json',
      ...(load.token === undefined ? {} : { authorization: `Bearer ${load.token}` })
    },
    ...(load.body === undefined ? {} : { body: JSON.stringify(load.body) })
  }
  const { paths } = load
  if (paths !== undefined) {
    let connection = 0
    Object.assign(options, { setupClient: (client: { setRequest: (request: object) => void }) => { client.setRequest({ ...options, path: paths[connection++ % paths.length] }) } })
  }
  if (load.keyed === true) {
    Object.assign(options, { requests: [{ setupRequest: (request: { headers: object }) => ({ ...request, headers: { ...request.headers, 'idempotency-key': randomUUID() } }) }] })
  }
  const warmUp = await autocannon({ ...options, duration: 1 })
  const result = await autocannon({ ...options, duration })
  return {
    requestsPerSecond: Math.round(result.requests.average),
    requests: warmUp.requests.total + result.requests.total,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts
  }
}

const SCENARIOS = 32
// The usual Fastify setup of such a service: @fastify/jwt's request.jwtVerify() and @fastify/rate-limit with its
// default headers, serving the same routes as the bare baseline.
const USUAL = {
  list: 'baseline: usual setup (jwt + rate-limit), GET /v1/items',
  get: 'baseline: usual setup (jwt + rate-limit), GET /v1/items/{id}',
  create: 'baseline: usual setup (jwt + rate-limit), POST /v1/items',
  edit: 'baseline: usual setup (jwt + rate-limit), PATCH /v1/items/{id}'
}
// Bare Fastify with ioredis on the Redis instance's keys: the page script's texts sent as they are, and (what a
// Fastify user usually writes) parsed and serialized again by the route's response schema.
const REDIS = {
  list: 'baseline: bare Fastify + ioredis, GET /v1/items',
  get: 'baseline: bare Fastify + ioredis, GET /v1/items/{id}'
}
// Bare Fastify with ioredis writing items under keys of its own, the body validated with the contract's schema and
// one EVALSHA a write: what a write on Redis costs at the least.
const REDIS_WRITE = {
  create: 'baseline: bare Fastify + ioredis, one EVALSHA, POST /v1/items',
  edit: 'baseline: bare Fastify + ioredis, one EVALSHA, PATCH /v1/items/{id}'
}
// The usual setup of such a write on Redis: @fastify/jwt, @fastify/rate-limit counting in Redis (its store's script),
// and the item written by one EVALSHA, as the bare anchor writes it.
const USUAL_REDIS_WRITE = {
  create: 'baseline: usual setup on Redis (jwt + rate-limit on Redis + one EVALSHA), POST /v1/items',
  edit: 'baseline: usual setup on Redis (jwt + rate-limit on Redis + one EVALSHA), PATCH /v1/items/{id}'
}
const REDIS_PARSED = {
  list: 'baseline: bare Fastify + ioredis, parsed and serialized, GET /v1/items',
  get: 'baseline: bare Fastify + ioredis, parsed and serialized, GET /v1/items/{id}'
}
const FLOOD_SECONDS = 2 * (2 * DURATION + 10)
const expectedSeconds = ROUNDS * (SCENARIOS + 1) * (DURATION + 1) + FLOOD_SECONDS + 15
console.log(`npm run bench: ${SCENARIOS} scenarios × ${ROUNDS} rounds of ${DURATION} s, five starts, a sign-in flood: about ${Math.ceil(expectedSeconds / 60)} minutes`)

const redisKeyPrefix = `items-service-bench:${process.pid}:`
const BENCH_ITEM = { description: 'A benchmark item with a short description.' }

// Registers the benchmark's user and gives it 100 items; its token and its first page.
async function seed (url: string): Promise<{ token: string, page: { data: Array<{ id: string }> } }> {
  const contributor = await call(`${url}/v1/auth/register`, 'POST', { email: 'bench@example.com', password: 'benchmark password', firstName: 'Bench', lastName: 'Mark', role: 'contributor' })
  for (let index = 0; index < 100; index += 1) await call(`${url}/v1/items`, 'POST', { name: `Item ${index}`, ...BENCH_ITEM }, contributor.accessToken)
  return { token: contributor.accessToken, page: await call(`${url}/v1/items?pageSize=20`, 'GET', undefined, contributor.accessToken) }
}

// Seed the service and take its first page, so the baselines serve the very same payload.
const service = await startService()
const v1 = `${service.url}/v1`
const { token, page } = await seed(service.url)
const itemId = page.data[0]!.id
const onRedis = await startService({ ...serviceEnv, STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: redisKeyPrefix })
const seededOnRedis = await seed(onRedis.url)
// A replica of the Redis at REDIS_URL, and an instance whose writes wait for it (REDIS_REPLICAS_TO_ACKNOWLEDGE=1),
// beside the one whose writes do not: what acknowledged-means-replicated costs a create and an edit.
const replica = await startReplica(REDIS_URL)
const replicatedKeyPrefix = `${redisKeyPrefix}replicated:`
const onRedisReplicated = await startService({ ...serviceEnv, STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: replicatedKeyPrefix, REDIS_REPLICAS_TO_ACKNOWLEDGE: '1' })
const seededReplicated = await seed(onRedisReplicated.url)
const receiver = await startReceiver()
const WEBHOOK_SECRET = `whsec_${Buffer.alloc(32, 1).toString('base64')}`
const withWebhook = await startService({ ...serviceEnv, WEBHOOKS: JSON.stringify([{ url: receiver.url, secret: WEBHOOK_SECRET }]) })
const seededWithWebhook = await seed(withWebhook.url)

const startBaseline = async (kind: string): Promise<Server> =>
  await start(['node', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: kind, BASELINE_PAGE: JSON.stringify(page), JWT_SECRET })
const redisAnchor = { REDIS_URL, REDIS_KEY_PREFIX: redisKeyPrefix }
const baselines = await Promise.all([startBaseline('bare'), startBaseline('logger'), startBaseline('jwt'), startBaseline('usual'),
  ...['redis', 'redis-parsed', 'redis-usual'].map(async (kind) => await start(['node', '--import', 'tsx', 'scripts/bench/baseline-server.ts'], { BASELINE: kind, JWT_SECRET, ...redisAnchor }))])
const [bare, withLogger, usualJwt, usualSetup, bareRedis, parsedRedis, usualRedis] = baselines as [Server, Server, Server, Server, Server, Server, Server]
// The edits on Redis spread over items, one a connection, as clients edit: one item's edits wait for each other.
const anchorItems: Array<{ id: string }> = []
for (let index = 0; index < CONNECTIONS; index += 1) anchorItems.push(await call(`${bareRedis.url}/v1/items`, 'POST', { name: 'Anchor', ...BENCH_ITEM }) as { id: string })
const spread = (items: ReadonlyArray<{ id: string }>): string[] => items.slice(0, CONNECTIONS).map(({ id }) => `/v1/items/${id}`)
const redisStats = new Redis(REDIS_URL)
// Microseconds of CPU the Redis server spent (INFO cpu: its own user and system time, the reading of requests and
// the writing of replies included), and the commands it ran (INFO commandstats' calls, each command a script calls
// counted besides the script), over a scenario's requests. Not commandstats' usec: a script's time includes that of
// the commands it calls, which are listed under their own names too, so their sum counts those twice.
const redisMicrosPerRequest: Record<string, number[]> = {}
const redisCommandsPerRequest: Record<string, number[]> = {}
async function redisReading (): Promise<{ micros: number, calls: number }> {
  const [cpu, commands] = await Promise.all([redisStats.info('cpu'), redisStats.info('commandstats')])
  const seconds = (field: string): number => Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(cpu)?.[1])
  const calls = [...commands.matchAll(/[:,]calls=(\d+)/g)].reduce((sum, [, value]) => sum + Number(value), 0)
  return { micros: (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6, calls }
}
async function measureRedisCpu (name: string, load: Load): Promise<Measurement> {
  const before = await redisReading()
  const measurement = await measure(load)
  const after = await redisReading()
  const requests = Math.max(measurement.requests, 1)
  redisMicrosPerRequest[name] = [...redisMicrosPerRequest[name] ?? [], (after.micros - before.micros) / requests]
  redisCommandsPerRequest[name] = [...redisCommandsPerRequest[name] ?? [], (after.calls - before.calls) / requests]
  return measurement
}
const pageOf = (server: Server): Load => ({ url: `${server.url}/v1/items?pageSize=20`, token })

const list: Load = { url: `${v1}/items?pageSize=20`, token }
const login: Load = { url: `${v1}/auth/login`, method: 'POST', body: { email: 'bench@example.com', password: 'benchmark password' } }
const getOne: Load = { url: `${v1}/items/${itemId}`, token }
const create: Load = { url: `${v1}/items`, method: 'POST', token, body: { name: 'Created', description: null } }
const edit: Load = { url: `${v1}/items/${itemId}`, method: 'PATCH', token, body: { name: 'Edited' } }
const listOnRedis: Load = { url: `${onRedis.url}/v1/items?pageSize=20`, token: seededOnRedis.token }
const getOnRedis: Load = { url: `${onRedis.url}/v1/items/${seededOnRedis.page.data[0]!.id}`, token: seededOnRedis.token }
const createOnRedis: Load = { ...create, url: `${onRedis.url}/v1/items`, token: seededOnRedis.token }
const KEYED_CREATE_ON_REDIS = 'POST /v1/items with STORE=redis, each with an Idempotency-Key'
const editOnRedis: Load = { ...edit, url: `${onRedis.url}/v1/items/${seededOnRedis.page.data[0]!.id}`, token: seededOnRedis.token, paths: spread(seededOnRedis.page.data) }
const editOnRedisAnchor = (anchor: Server): Load => ({ ...edit, url: `${anchor.url}/v1/items/${anchorItems[0]!.id}`, paths: spread(anchorItems) })
const createReplicated: Load = { ...create, url: `${onRedisReplicated.url}/v1/items`, token: seededReplicated.token }
const editReplicated: Load = { ...edit, url: `${onRedisReplicated.url}/v1/items/${seededReplicated.page.data[0]!.id}`, token: seededReplicated.token }
const createWithWebhook: Load = { ...create, url: `${withWebhook.url}/v1/items`, token: seededWithWebhook.token }
// Events the receiver took in a second while the create with a webhook ran (its warm-up second included).
const deliveryRates: number[] = []
async function measureWithDeliveries (load: Load): Promise<Measurement> {
  const before = receiver.received.length
  const started = performance.now()
  const measurement = await measure(load)
  deliveryRates.push(Math.round((receiver.received.length - before) / ((performance.now() - started) / 1000)))
  return measurement
}
const onBare = (load: Load): Load => ({ ...load, url: load.url.replace(service.url, bare.url) })
const onUsual = (load: Load): Load => ({ ...load, url: load.url.replace(service.url, usualSetup.url) })
const onRedisAnchor = (load: Load, anchor: Server): Load => ({ ...load, url: load.url.replace(onRedis.url, anchor.url) })
const scenarios: Record<string, () => Promise<Measurement>> = {
  'baseline: bare Fastify, GET /v1/items': async () => await measure(pageOf(bare)),
  'GET /v1/items?pageSize=20': async () => await measure(list),
  [REDIS.list]: async () => await measure(onRedisAnchor(listOnRedis, bareRedis)),
  'GET /v1/items?pageSize=20 with STORE=redis': async () => await measure(listOnRedis),
  [REDIS_PARSED.list]: async () => await measure(onRedisAnchor(listOnRedis, parsedRedis)),
  'baseline: bare Fastify, GET /v1/items/{id}': async () => await measure(onBare(getOne)),
  'GET /v1/items/{id}': async () => await measure(getOne),
  [REDIS.get]: async () => await measure(onRedisAnchor(getOnRedis, bareRedis)),
  'GET /v1/items/{id} with STORE=redis': async () => await measure(getOnRedis),
  [REDIS_PARSED.get]: async () => await measure(onRedisAnchor(getOnRedis, parsedRedis)),
  'baseline: bare Fastify, POST /v1/items': async () => await measure(onBare(create)),
  'POST /v1/items': async () => await measure(create),
  'POST /v1/items with one webhook subscriber': async () => await measureWithDeliveries(createWithWebhook),
  'baseline: bare Fastify, PATCH /v1/items/{id}': async () => await measure(onBare(edit)),
  'PATCH /v1/items/{id}': async () => await measure(edit),
  [REDIS_WRITE.create]: async () => await measureRedisCpu(REDIS_WRITE.create, onRedisAnchor(createOnRedis, bareRedis)),
  'POST /v1/items with STORE=redis': async () => await measureRedisCpu('POST /v1/items with STORE=redis', createOnRedis),
  [KEYED_CREATE_ON_REDIS]: async () => await measureRedisCpu(KEYED_CREATE_ON_REDIS, { ...createOnRedis, keyed: true }),
  'POST /v1/items with STORE=redis, a replica acknowledging': async () => await measure(createReplicated),
  [USUAL_REDIS_WRITE.create]: async () => await measureRedisCpu(USUAL_REDIS_WRITE.create, onRedisAnchor(createOnRedis, usualRedis)),
  [REDIS_WRITE.edit]: async () => await measureRedisCpu(REDIS_WRITE.edit, editOnRedisAnchor(bareRedis)),
  'PATCH /v1/items/{id} with STORE=redis': async () => await measureRedisCpu('PATCH /v1/items/{id} with STORE=redis', editOnRedis),
  [USUAL_REDIS_WRITE.edit]: async () => await measureRedisCpu(USUAL_REDIS_WRITE.edit, editOnRedisAnchor(usualRedis)),
  'PATCH /v1/items/{id} with STORE=redis, a replica acknowledging': async () => await measure(editReplicated),
  'baseline: + Fastify logger (level warn)': async () => await measure(pageOf(withLogger)),
  'baseline: + @fastify/jwt request.jwtVerify()': async () => await measure(pageOf(usualJwt)),
  [USUAL.list]: async () => await measure(onUsual(list)),
  [USUAL.get]: async () => await measure(onUsual(getOne)),
  [USUAL.create]: async () => await measure(onUsual(create)),
  [USUAL.edit]: async () => await measure(onUsual(edit)),
  'POST /v1/auth/login': async () => await measure(login),
  'GET /v1/items during a login storm': async () => (await Promise.all([measure(list), measure({ ...login, connections: 8 })]))[0]
}
// Each scenario's ratios are to the bare-Fastify route that answers the same request, the list's by default; on
// Redis, to bare Fastify and ioredis sending the texts, whose own are to bare Fastify's.
const baselineOf: Record<string, string> = {
  'GET /v1/items?pageSize=20 with STORE=redis': REDIS.list,
  'GET /v1/items/{id} with STORE=redis': REDIS.get,
  [REDIS.get]: 'baseline: bare Fastify, GET /v1/items/{id}',
  [REDIS_PARSED.list]: REDIS.list,
  [REDIS_PARSED.get]: REDIS.get,
  'GET /v1/items/{id}': 'baseline: bare Fastify, GET /v1/items/{id}',
  'POST /v1/items': 'baseline: bare Fastify, POST /v1/items',
  'POST /v1/items with one webhook subscriber': 'POST /v1/items',
  'PATCH /v1/items/{id}': 'baseline: bare Fastify, PATCH /v1/items/{id}',
  [REDIS_WRITE.create]: 'baseline: bare Fastify, POST /v1/items',
  'POST /v1/items with STORE=redis': REDIS_WRITE.create,
  [KEYED_CREATE_ON_REDIS]: REDIS_WRITE.create,
  'POST /v1/items with STORE=redis, a replica acknowledging': 'POST /v1/items with STORE=redis',
  [REDIS_WRITE.edit]: 'baseline: bare Fastify, PATCH /v1/items/{id}',
  [USUAL_REDIS_WRITE.create]: REDIS_WRITE.create,
  [USUAL_REDIS_WRITE.edit]: REDIS_WRITE.edit,
  'PATCH /v1/items/{id} with STORE=redis': REDIS_WRITE.edit,
  'PATCH /v1/items/{id} with STORE=redis, a replica acknowledging': 'PATCH /v1/items/{id} with STORE=redis'
}
const baselineNameOf = (name: string): string => baselineOf[name] ?? 'baseline: bare Fastify, GET /v1/items'
// Each of the four main scenarios is also compared with the same route served the usual way; on Redis, parsed and
// serialized again.
const usualOf: Record<string, string> = {
  'GET /v1/items?pageSize=20 with STORE=redis': REDIS_PARSED.list,
  'GET /v1/items/{id} with STORE=redis': REDIS_PARSED.get,
  'GET /v1/items?pageSize=20': USUAL.list,
  'GET /v1/items/{id}': USUAL.get,
  'POST /v1/items': USUAL.create,
  'PATCH /v1/items/{id}': USUAL.edit,
  'POST /v1/items with STORE=redis': USUAL_REDIS_WRITE.create,
  [KEYED_CREATE_ON_REDIS]: USUAL_REDIS_WRITE.create,
  'PATCH /v1/items/{id} with STORE=redis': USUAL_REDIS_WRITE.edit
}
// A round takes the scenarios in the order above, which puts each one beside what it is compared with, and every
// other round in the reverse order, so that neither of two neighbours always goes first. Each ratio is taken
// within a round, between measurements a few seconds apart, and the median of the rounds' ratios is reported: a
// slow spell of the machine, which moves one measurement by ±15 % and more, mostly hits both sides of a ratio.
const runs = new Map<string, Measurement[]>()
for (let round = 0; round < ROUNDS; round += 1) {
  const inOrder = Object.entries(scenarios)
  for (const [name, run] of round % 2 === 0 ? inOrder : inOrder.reverse()) {
    const measurement = await run()
    runs.set(name, [...runs.get(name) ?? [], measurement])
    console.log(`round ${round + 1}/${ROUNDS}, ${name}: ${measurement.requestsPerSecond} req/s, p99 ${measurement.p99} ms`)
  }
}
await Promise.all(baselines.map(stop))
await stop(service)
await stop(onRedis)
await stop(onRedisReplicated)
replica.stop()
await stop(withWebhook)
await receiver.stop()
redisStats.disconnect()
await deleteKeys(redisKeyPrefix, REDIS_URL)

const redisMemory = await redisBytesPerItem(redisKeyPrefix, BENCH_ITEM)
console.log(`Redis: ${redisMemory.keysBytesPerItem} bytes per item (MEMORY USAGE), ${redisMemory.usedMemoryBytesPerItem} (used_memory growth), at ${redisMemory.items} items`)

const startups: number[] = []
for (let run = 0; run < 5; run += 1) {
  const fresh = await startService()
  startups.push(fresh.startupMs)
  await stop(fresh)
}

// Twice the measurement's length, so that the flood outlasts the sign-ins timed meanwhile.
const floodOptions = { seconds: 2 * DURATION, connections: CONNECTIONS }
const signInFloods = { oneCore: await floodSignIns(true, floodOptions), twoCores: await floodSignIns(false, floodOptions) }
// Medians of the rounds; a single non-2xx response or error in any round shows.
const summarise = (measurements: Measurement[]): Measurement => ({
  requestsPerSecond: median(measurements.map((m) => m.requestsPerSecond)),
  requests: measurements.reduce((sum, m) => sum + m.requests, 0),
  p50: median(measurements.map((m) => m.p50)),
  p99: median(measurements.map((m) => m.p99)),
  non2xx: measurements.reduce((sum, m) => sum + m.non2xx, 0),
  errors: measurements.reduce((sum, m) => sum + m.errors, 0)
})
const results = new Map([...runs].map(([name, measurements]) => [name, summarise(measurements)]))
// The ratio of two measurements of the same round, in each round.
const ratiosOf = (name: string, of: (measurement: Measurement) => number, against = baselineNameOf(name)): number[] => {
  const baseline = runs.get(against) ?? []
  return (runs.get(name) ?? []).map((measurement, round) => {
    const against = baseline[round]
    return against === undefined ? NaN : of(measurement) / Math.max(of(against), 1)
  })
}
const rows = [...results].map(([name, m]) => {
  const ratios = ratiosOf(name, (measurement) => measurement.requestsPerSecond)
  return {
    name,
    ...m,
    ratio: Number(median(ratios).toFixed(2)),
    roundRatios: ratios.map((ratio) => Number(ratio.toFixed(2))),
    p99Ratio: Number(median(ratiosOf(name, (measurement) => measurement.p99)).toFixed(2)),
    usualRatio: usualOf[name] === undefined ? undefined : Number(median(ratiosOf(name, (measurement) => measurement.requestsPerSecond, usualOf[name])).toFixed(2))
  }
})
const listAlone = results.get('GET /v1/items?pageSize=20')?.p99 ?? NaN
const listDuringStorm = results.get('GET /v1/items during a login storm')?.p99 ?? NaN
const report = {
  date: new Date().toISOString(),
  node: process.version,
  durationSeconds: DURATION,
  rounds: ROUNDS,
  connections: CONNECTIONS,
  rows,
  runs: Object.fromEntries(runs),
  loginStormP99Ratio: Number((listDuringStorm / Math.max(listAlone, 1)).toFixed(2)),
  signInFloods,
  redisMemory,
  redisMicrosPerRequest: Object.fromEntries(Object.entries(redisMicrosPerRequest).map(([name, rounds]) => [name, { median: Number(median(rounds).toFixed(1)), rounds: rounds.map((micros) => Number(micros.toFixed(1))) }])),
  redisCommandsPerRequest: Object.fromEntries(Object.entries(redisCommandsPerRequest).map(([name, rounds]) => [name, { median: Number(median(rounds).toFixed(2)), rounds: rounds.map((calls) => Number(calls.toFixed(2))) }])),
  webhookDeliveriesPerSecond: median(deliveryRates),
  startupMs: { median: Math.round(median(startups)), runs: startups.map(Math.round) }
}

// Each write on Redis beside the bare anchor's one EVALSHA: what it costs the one part every instance shares.
const redisCpuRatios = Object.entries(baselineOf).filter(([name, against]) => against in report.redisMicrosPerRequest && name in report.redisMicrosPerRequest)
  .map(([name, against]) => ({ name, ratio: Number((report.redisMicrosPerRequest[name]!.median / Math.max(report.redisMicrosPerRequest[against]!.median, 1e-9)).toFixed(2)) }))
const table = [
  '| scenario | req/s | p50 ms | p99 ms | non-2xx | errors | × its baseline req/s | (each round) | × its baseline p99 | × the usual setup req/s |',
  '|---|---:|---:|---:|---:|---:|---:|---|---:|---:|',
  ...rows.map((row) => `| ${row.name} | ${row.requestsPerSecond} | ${row.p50} | ${row.p99} | ${row.non2xx} | ${row.errors} | ${row.ratio} | ${row.roundRatios.join(', ')} | ${row.p99Ratio} | ${row.usualRatio ?? ''} |`),
  '',
  `List p99 during a login storm / alone: ${report.loginStormP99Ratio}×`,
  ...Object.entries(signInFloods).map(([cores, flood]) => `Sign-in from 127.0.0.2 while 127.0.0.1 floods ${flood.floodRequests} sign-ins with unknown emails (${cores === 'oneCore' ? 'service on one core' : 'service on two cores'}): p50 ${flood.flooded.p50} ms, p99 ${flood.flooded.p99} ms (idle: p50 ${flood.idle.p50} ms, p99 ${flood.idle.p99} ms; p99 ${(flood.flooded.p99 / Math.max(flood.idle.p99, 1)).toFixed(2)}× idle); ${flood.failedSignIns} of ${FLOOD_SIGN_INS * 2} real sign-ins failed`),
  `Webhook deliveries while creating with one subscriber: median ${report.webhookDeliveriesPerSecond} events/s (rounds: ${deliveryRates.join(', ')}); that row is compared with the create with none`,
  `Redis per item at ${redisMemory.items} items: ${redisMemory.keysBytesPerItem} bytes (MEMORY USAGE of the item keys), ${redisMemory.usedMemoryBytesPerItem} bytes (growth of used_memory); the STORE=redis rows are compared with bare Fastify + ioredis on the same keys, and their last column with it parsing and serializing`,
  ...Object.entries(report.redisMicrosPerRequest).map(([name, micros]) => `Redis CPU per request (INFO cpu, user + sys), ${name}: median ${micros.median} µs (rounds: ${micros.rounds.join(', ')})`),
  ...redisCpuRatios.map(({ name, ratio }) => `Redis CPU per request, ${name}: ${ratio}× the bare anchor's one script`),
  ...Object.entries(report.redisCommandsPerRequest).map(([name, calls]) => `Redis commands per request (INFO commandstats, a script's own counted besides it), ${name}: median ${calls.median} (rounds: ${calls.rounds.join(', ')})`),
  `Process start to first successful request: median ${report.startupMs.median} ms (runs: ${report.startupMs.runs.join(', ')})`
].join('\n')
await mkdir('bench-results', { recursive: true })
await writeFile('bench-results/bench.json', `${JSON.stringify({ ...report, redisCpuRatios }, null, 2)}\n`)
await writeFile('bench-results/bench.md', `${table}\n`)
console.log(table)
// Every scenario's requests are ones the service serves: a refusal or an error measures something else.
const refused = rows.filter((row) => row.non2xx > 0 || row.errors > 0).map((row) => row.name)
if (refused.length > 0) {
  console.error(`Not measured: answers other than 2xx, or errors, in ${refused.join('; ')}`)
  process.exitCode = 1
}
