// A real Prometheus (Debian's package) scrapes two instances on Redis and answers PromQL about them: what an
// operator's dashboards and ops/alerts.yml read.
import { execFile, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import t from 'tap'
import { newUser, type Schemas } from '../../support/api.js'
import { freePort } from '../../../harness/net.js'
import { type Server, start } from '../../support/processes.js'
import { redisKeyPrefix, redisSkip } from '../../support/redis.js'
import { startReceiver } from '../../../harness/webhook-receiver.js'

const PROMETHEUS = '/usr/bin/prometheus'
const PROMTOOL = '/usr/bin/promtool'
// .ci/run installs Debian's prometheus package; with CI=true a missing one fails the run rather than skipping.
const missing = existsSync(PROMETHEUS) || process.env.CI === 'true' ? false : `no Prometheus at ${PROMETHEUS} (apt-get install prometheus)`
const run = promisify(execFile)

t.test('promtool accepts ops/alerts.yml, and its rules fire when their tests say', { skip: missing }, async (t) => {
  const { stdout } = await run(PROMTOOL, ['check', 'rules', 'ops/alerts.yml'])
  t.match(stdout, /SUCCESS: \d+ rules found/)
  t.match((await run(PROMTOOL, ['test', 'rules', 'ops/alerts.test.yml'])).stdout, /SUCCESS/)
})

interface Vector { metric: Record<string, string>, value: [number, string] }

// Figures compared whatever order Prometheus lists them in.
const canonical = (figures: Record<string, number>): string => JSON.stringify(Object.entries(figures).sort(([a], [b]) => a.localeCompare(b)))

t.test('Prometheus reads the request counts per operation, the shared webhook backlog and the dead letters of two instances', { skip: missing || await redisSkip() }, async (t) => {
  const hanging = await startReceiver()
  const failing = await startReceiver()
  t.teardown(async () => { await Promise.all([hanging.stop(), failing.stop()]) })
  const secret = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
  const env = {
    STORE: 'redis',
    REDIS_KEY_PREFIX: redisKeyPrefix(t),
    WEBHOOKS: JSON.stringify([{ url: hanging.url, secret }, { url: failing.url, secret }]),
    // The hanging subscriber's deliveries stay pending for the whole test; the failing one's are given up at once.
    WEBHOOK_TIMEOUT_MS: '60000',
    WEBHOOK_RECLAIM_AFTER_MS: '120000',
    WEBHOOK_RETRY_DELAYS_MS: '50'
  }
  hanging.answer(...Array<'hang'>(10).fill('hang'))
  failing.answer(...Array<number>(10).fill(500))
  // Each on a port it picks itself (a port found free and then listened on may be taken in between), and each
  // killed at the end however the other's start went.
  const instances: Server[] = []
  for (let index = 0; index < 2; index += 1) {
    const instance = await start({ ...env, OPS_PORT: '0' })
    t.teardown(() => { instance.process.kill('SIGKILL') })
    instances.push(instance)
  }
  const targets = instances.map((instance) => new URL(instance.opsUrl ?? '').host)

  const directory = await mkdtemp(join(tmpdir(), 'items-prometheus-'))
  t.teardown(async () => { await rm(directory, { recursive: true, force: true }) })
  await writeFile(join(directory, 'prometheus.yml'), JSON.stringify({
    global: { scrape_interval: '1s' },
    scrape_configs: [{ job_name: 'items-service', static_configs: [{ targets }] }]
  }))
  const prometheusPort = await freePort()
  const prometheus = spawn(PROMETHEUS, [
    `--config.file=${join(directory, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(directory, 'data')}`,
    `--web.listen-address=127.0.0.1:${prometheusPort}`
  ], { stdio: 'ignore' })
  t.teardown(() => { prometheus.kill('SIGKILL') })
  const query = async (promql: string): Promise<Vector[]> => {
    const response = await fetch(`http://127.0.0.1:${prometheusPort}/api/v1/query?query=${encodeURIComponent(promql)}`).catch(() => undefined)
    if (response?.status !== 200) return []
    return ((await response.json()) as { data: { result: Vector[] } }).data.result
  }
  // Each figure as Prometheus has it, once its scrapes have caught up with what the test did (or after 30 s).
  const settled = async (promql: string, expected: Record<string, number>, by: string): Promise<Record<string, number>> => {
    let figures: Record<string, number> = {}
    for (const givesUp = Date.now() + 30_000; Date.now() < givesUp; await sleep(250)) {
      figures = Object.fromEntries((await query(promql)).map((vector) => [vector.metric[by] ?? '', Number(vector.value[1])]))
      if (canonical(figures) === canonical(expected)) break
    }
    return figures
  }

  const send = async (instance: number, path: string, body: unknown, token?: string): Promise<Response> => await fetch(`${instances[instance]!.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: JSON.stringify(body)
  })
  const tokens: string[] = []
  for (const instance of [0, 1]) {
    const response = await send(instance, '/v1/auth/register', newUser({ role: 'contributor' }))
    tokens.push(((await response.json()) as Schemas['AuthResponse']).accessToken)
  }
  for (const [instance, token] of [[0, tokens[0]], [0, tokens[0]], [1, tokens[1]]] as const) {
    t.equal((await send(instance, '/v1/items', { name: 'counted' }, token)).status, 201)
  }

  t.same(await settled('sum by (operation) (http_server_request_duration_seconds_count{job="items-service"})', { createItem: 3, registerUser: 2 }, 'operation'),
    { createItem: 3, registerUser: 2 }, 'requests per operation, over both instances')
  t.same(await settled('sum by (instance) (http_server_request_duration_seconds_count{operation="createItem"})',
    Object.fromEntries(targets.map((target, index) => [target, index === 0 ? 2 : 1])), 'instance'),
  Object.fromEntries(targets.map((target, index) => [target, index === 0 ? 2 : 1])), 'and per instance')
  t.same(await settled(`items_service_webhook_backlog{subscriber="${hanging.url}"}`, Object.fromEntries(targets.map((target) => [target, 3])), 'instance'),
    Object.fromEntries(targets.map((target) => [target, 3])), 'each instance reports the shared backlog, read from Redis')
  t.same(await settled('sum by (subscriber) (items_service_webhook_deliveries_total{outcome="dead_lettered"})', { [failing.url]: 3 }, 'subscriber'),
    { [failing.url]: 3 }, 'the deliveries given up, whichever instance gave them up')
  t.same(await settled('max by (subscriber) (items_service_webhook_dead_letters)', { [failing.url]: 3, [hanging.url]: 0 }, 'subscriber'),
    { [failing.url]: 3, [hanging.url]: 0 }, 'and the dead letters kept, read from Redis')
  t.same(await settled('sum(items_service_store_up)', { '': 2 }, 'none'), { '': 2 }, 'both instances reach Redis')
})
