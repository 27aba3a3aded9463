// docs/testing.md's "A test rig's settings", run as a team's rig runs it: the service started from the recipe's
// environment, and 16 workers at once, each registering its user, creating, listing by its own contributorId and
// removing its account on the operations API. The figures it prints are docs/testing.md's.
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import type { operations } from '../generated/operations/openapi.js'
import { REDIS_URL } from '../harness/redis-keys.js'
import { startReceiver } from '../harness/webhook-receiver.js'
import { newUser, type Schemas } from './support/api.js'
import { type Server, start } from './support/processes.js'
import { redisKeyPrefix, redisSkip } from './support/redis.js'
import { HANG_MS, retryUntil } from './support/wait.js'

const run = promisify(execFile)

const WORKERS = 16
const ITEMS_EACH = 3
// How the sandbox rig finds what each create caused: its journal, or (RIG_EVENTS=polling) the events listed and
// matched by hand, as a rig without the journal does: docs/testing.md compares their run times.
const RIG_EVENTS = process.env.RIG_EVENTS === 'polling' ? 'polling' : 'journal'

type Journal = operations['listSandboxJournal']['responses'][200]['content']['application/json']

/** The variables the command of docs/testing.md's `heading` sets (the rig's recipe by default), as written there. */
function recipeEnvironment (heading = "### A test rig's settings"): Record<string, string> {
  const docs = readFileSync('docs/testing.md', 'utf8')
  const section = docs.slice(docs.indexOf(heading))
  const command = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const started = command.slice(command.indexOf('&&') + 2).replace(/\\\n/g, ' ')
  return Object.fromEntries([...started.matchAll(/\b([A-Z_]+)=(\S+)/g)].map(([, name, value]) => [name!, value!]))
}

// The heading of docs/testing.md whose command starts a rig's server with sandboxes.
const SANDBOX_RIG = '### Sandboxes: a catalogue per worker'

/** A JSON request as a worker sends it, with its access token and its own request id when given; the answer's status and body. */
async function send (url: string, init: RequestInit & { token?: string, requestId?: string } = {}): Promise<{ status: number, body: unknown }> {
  const response = await fetch(url, {
    ...init,
    headers: {
      'content-type': 'application/json',
      ...(init.token === undefined ? {} : { authorization: `Bearer ${init.token}` }),
      ...(init.requestId === undefined ? {} : { 'x-request-id': init.requestId })
    }
  })
  const text = await response.text()
  return { status: response.status, body: text === '' ? undefined : JSON.parse(text) }
}

t.test('the test rig\'s recipe: 16 workers register, create, list their own and remove their accounts, none refused', async (t) => {
  const recipe = recipeEnvironment()
  t.match(recipe, { NODE_ENV: 'test', RATE_LIMIT: 'off', PASSWORD_HASH_MEMORY_KIB: '8', PASSWORD_HASH_PASSES: '1', SEED_FILE: 'test/fixtures.json' }, 'the recipe says its settings')
  const began = performance.now()
  // Its store is the run's (STORE), its ports free ones.
  const server = await start({ ...recipe, OPS_PORT: '0' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const readyMs = performance.now() - began
  const ops = server.opsUrl ?? ''
  const call = async (path: string, init: RequestInit & { token?: string } = {}): Promise<{ status: number, body: unknown }> => await send(`${server.url}${path}`, init)
  const statuses: number[] = []
  let registeredMs = 0
  const worker = async (): Promise<void> => {
    const registering = performance.now()
    const registered = await call('/v1/auth/register', { method: 'POST', body: JSON.stringify(newUser({ role: 'contributor' })) })
    registeredMs = Math.max(registeredMs, performance.now() - registering)
    statuses.push(registered.status)
    const { accessToken, user } = registered.body as Schemas['AuthResponse']
    for (let index = 0; index < ITEMS_EACH; index += 1) {
      statuses.push((await call('/v1/items', { method: 'POST', token: accessToken, body: JSON.stringify({ name: `rig item ${index}` }) })).status)
    }
    const own = await call(`/v1/items?contributorId=${user.id}`, { token: accessToken })
    t.equal((own.body as Schemas['ItemList']).pagination.total, ITEMS_EACH, 'a worker\'s list by its contributorId is its own, exactly')
    statuses.push((await fetch(`${ops}/accounts/${user.id}`, { method: 'DELETE' })).status)
    t.equal((await call('/v1/items', { token: accessToken })).status, 401, 'and its token is refused once its account is removed')
  }
  const running = performance.now()
  await Promise.all(Array.from({ length: WORKERS }, worker))
  const ranMs = performance.now() - running
  t.same([...new Set(statuses)].sort(), [201, 204], 'every registration and create 201, every removal 204: nothing refused')
  t.comment(`started ready in ${Math.round(readyMs)} ms; ${WORKERS} registrations at once, the slowest answered in ${Math.round(registeredMs)} ms (${Math.round(WORKERS / (registeredMs / 1000))} a second); the whole rig in ${Math.round(ranMs)} ms`)
})

/**
 * The sandbox rig on `servers` (one, or instances sharing one Redis): each worker makes its sandbox on one server's
 * operations API, uses it on the next server's public API, and reads its events, moves its clock and deletes it
 * back on the first; each names a receiver of its own and checks its deliveries.
 */
async function sandboxRig (t: Test, servers: Server[]): Promise<number> {
  const statuses: number[] = []
  const worker = async (_: unknown, index: number): Promise<void> => {
    const ops = servers[index % servers.length]!.opsUrl ?? ''
    const created = await send(`${ops}/sandboxes`, { method: 'POST', body: '{}' })
    statuses.push(created.status)
    const { basePath } = created.body as { basePath: string }
    const base = `${servers[(index + 1) % servers.length]!.url}${basePath}`
    const receiver = await startReceiver()
    t.teardown(receiver.stop)
    const secret = `whsec_${randomBytes(32).toString('base64')}`
    const subscribed = await send(`${ops}${basePath}/webhook`, { method: 'PUT', body: JSON.stringify({ url: receiver.url, secret }) })
    t.equal(subscribed.status, 204, `its receiver is set: ${JSON.stringify(subscribed.body)}`)
    const registered = await send(`${base}/v1/auth/register`, { method: 'POST', body: JSON.stringify(newUser({ role: 'contributor' })) })
    statuses.push(registered.status)
    const { accessToken, refreshToken, expiresIn } = registered.body as Schemas['AuthResponse']
    const made: string[] = []
    const requestIds: string[] = []
    for (let item = 0; item < ITEMS_EACH; item += 1) {
      requestIds.push(`rig-worker-${index}:create-${item}`)
      const created = await send(`${base}/v1/items`, { method: 'POST', token: accessToken, requestId: requestIds[item], body: JSON.stringify({ name: `rig item ${item}` }) })
      statuses.push(created.status)
      made.push((created.body as Schemas['Item']).id)
    }
    const all = (await send(`${base}/v1/items`, { token: accessToken })).body as Schemas['ItemList']
    t.same([all.pagination.total, all.data.map((item) => item.id)], [ITEMS_EACH, made], 'a worker\'s unfiltered list is its own, exactly')
    const listEvents = async (): Promise<Array<{ event: { id: string, type: string, subject: string } }>> =>
      ((await send(`${ops}${basePath}/events`)).body as { events: Array<{ event: { id: string, type: string, subject: string } }> }).events
    if (RIG_EVENTS === 'polling') {
      // As a rig without the journal: the list read again until it holds an event for each item, matched by hand.
      const polled = await retryUntil('an event for each item', listEvents, (listed) => listed.length >= ITEMS_EACH, { everyMs: 10 })
      t.same(polled.map(({ event }) => [event.type, event.subject]), made.map((id) => ['items.item.added', id]), 'and its events are the ones it caused')
    } else {
      // Each create's entry, awaited, names the event it caused.
      const events = await listEvents()
      const caused = await Promise.all(requestIds.map(async (requestId) => {
        const { entries } = (await send(`${ops}${basePath}/journal?requestId=${requestId}&type=items.item.added&waitSeconds=10`)).body as Journal
        return entries.map(({ status, events: [event] }) => [status, events.find(({ event: listed }) => listed.id === event?.id)?.event.subject])
      }))
      t.same(caused, made.map((id) => [[201, id]]), 'and its journal ties each create to the event it caused')
    }
    const delivered = (await receiver.waitFor(ITEMS_EACH, HANG_MS)).map((received) => (new Webhook(secret).verify(received.body,
      Object.fromEntries(Object.entries(received.headers).map(([name, value]) => [name, String(value)]))) as { subject: string }).subject)
    t.same(delivered.sort(), [...made].sort(), 'and so are the events delivered, signed with its secret, to its receiver')
    const advanced = await send(`${ops}${basePath}/clock/advance`, { method: 'POST', body: JSON.stringify({ seconds: expiresIn + 1 }) })
    statuses.push(advanced.status)
    const expired = await send(`${base}/v1/items`, { token: accessToken })
    t.same([expired.status, (expired.body as Schemas['ErrorResponse']).code], [401, 'TOKEN_EXPIRED'], 'its clock moved past its access token\'s lifetime: expired')
    const refreshed = await send(`${base}/v1/auth/refresh`, { method: 'POST', body: JSON.stringify({ refreshToken }) })
    statuses.push(refreshed.status)
    statuses.push((await send(`${base}/v1/items`, { token: (refreshed.body as Schemas['AuthResponse']).accessToken })).status)
    statuses.push((await fetch(`${ops}${basePath}`, { method: 'DELETE' })).status)
  }
  const running = performance.now()
  await Promise.all(Array.from({ length: WORKERS }, worker))
  t.same([...new Set(statuses)].sort(), [200, 201, 204], 'every sandbox, registration and create 201, clock, refresh and list 200, every deletion 204: nothing refused')
  return performance.now() - running
}

t.test('the rig on sandboxes: 16 workers, each in a sandbox of its own, see exact unfiltered totals, the events they caused (listed, and delivered signed to their own receiver) and an expiry made by the clock', async (t) => {
  // On the memory store, whatever the run's store: Redis's follows.
  const began = performance.now()
  const recipe = recipeEnvironment(SANDBOX_RIG)
  t.match(recipe, { NODE_ENV: 'test', RATE_LIMIT: 'off', PASSWORD_HASH_MEMORY_KIB: '8', PASSWORD_HASH_PASSES: '1', SANDBOXES: 'on', OPS_PORT: '9464' }, 'the sandbox rig\'s command says its settings')
  const server = await start({ ...recipe, OPS_PORT: '0', STORE: 'memory' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const readyMs = performance.now() - began
  const ranMs = await sandboxRig(t, [server])
  t.comment(`on sandboxes: started ready in ${Math.round(readyMs)} ms; the whole rig in ${Math.round(ranMs)} ms`)
})

t.test('the rig on sandboxes on Redis, two instances started from the recipe sharing them: each worker makes its sandbox and names its receiver on one and uses it on the other', { skip: await redisSkip() }, async (t) => {
  const environment = { ...recipeEnvironment(SANDBOX_RIG), OPS_PORT: '0', STORE: 'redis', REDIS_URL, REDIS_KEY_PREFIX: redisKeyPrefix(t), JWT_SECRET: randomBytes(32).toString('base64') }
  const servers = await Promise.all([start(environment), start(environment)])
  t.teardown(() => { for (const server of servers) server.process.kill('SIGKILL') })
  const ranMs = await sandboxRig(t, servers)
  t.comment(`on sandboxes on Redis, two instances: the whole rig in ${Math.round(ranMs)} ms`)
})

t.test('docs/testing.md\'s Python test of what one request caused runs as written against the sandbox rig\'s server', async (t) => {
  const docs = readFileSync('docs/testing.md', 'utf8')
  const script = /```python\n([\s\S]*?)```/.exec(docs)?.[1]?.replace(/^ {2}/gm, '') ?? ''
  t.match(script, /journal\?requestId=/, 'the docs have it')
  const server = await start({ ...recipeEnvironment(SANDBOX_RIG), OPS_PORT: '0', STORE: 'memory' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const { stdout, stderr } = await run('python3', ['-c', script], { env: { ...process.env, OPS: server.opsUrl ?? '', API: server.url } })
  t.same([stdout, stderr], ['', ''], 'its assertion holds')
})
