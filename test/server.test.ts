import { once } from 'node:events'
import { Agent, request, type RequestOptions } from 'node:http'
import { type AddressInfo, connect, createServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { newUser } from './support/api.js'
import { until } from './support/wait.js'
import { failedStart, start } from './support/processes.js'
import { redisKeyPrefix, redisSkip } from './support/redis.js'

t.test('SIGTERM during load: every in-flight request completes, then the process exits 0', async (t) => {
  // Room in the hashing queue for twelve sign-ups from one address. The shutdown bound is far beyond what they
  // take: at its default, a machine whose other core is busy took the hashing process (at niceness 10) past it.
  const server = await start({ PASSWORD_QUEUE_LIMIT: '48', SHUTDOWN_TIMEOUT_MS: '60000' })
  // One sign-up first, which starts the hashing process: the test is about shutdown, not about that start.
  const register = async (): Promise<Response> => await fetch(`${server.url}/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(newUser())
  })
  t.equal((await register()).status, 201)
  const inFlight = Array.from({ length: 12 }, register)
  const arrived = (): number => server.output().split('\n').filter((line) => line.includes('"msg":"incoming request"') && line.includes('"url":"/v1/auth/register"')).length
  await until('the 13 requests to arrive', () => arrived() === 13)
  const exited = once(server.process, 'exit')
  server.process.kill('SIGTERM')
  const responses = await Promise.all(inFlight)
  t.same(responses.map((response) => response.status), Array<number>(12).fill(201))
  const [code] = await exited
  t.equal(code, 0)
  t.match(server.output(), /"signal":"SIGTERM".*"msg":"shutting down"/)
})

type Answer = { status: number, connection: string | undefined } | NodeJS.ErrnoException

/** One request over `agent`: its status and Connection field, or the error that ended it. */
const send = async (url: string, agent: Agent, options: RequestOptions = {}, body?: string): Promise<Answer> => await new Promise((resolve) => {
  request(url, { agent, ...options }, (response) => {
    response.resume()
    response.on('end', () => { resolve({ status: response.statusCode ?? 0, connection: response.headers.connection }) })
  }).on('error', resolve).end(body)
})

interface Outcome { ok: number, failed: string[] }

/**
 * `count` clients, each running `client` (requests one after another, on a kept-alive connection of its own) until
 * it returns, SIGTERM sent once each has been answered or refused (however long a busy machine takes to start
 * them): what each met, and the exit code.
 */
async function throughShutdown (server: Awaited<ReturnType<typeof start>>, count: number,
  client: (outcome: Outcome, agent: Agent, signalled: () => boolean) => Promise<void>): Promise<{ outcomes: Outcome[], code: unknown }> {
  let signalled = false
  const outcomes = Array.from({ length: count }, () => ({ ok: 0, failed: [] as string[] }))
  const clients = outcomes.map(async (outcome) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    await client(outcome, agent, () => signalled)
    agent.destroy()
  })
  await until('every client to be answered or refused', () => outcomes.every((outcome) => outcome.ok >= 1 || outcome.failed.length > 0))
  const exited = once(server.process, 'exit')
  signalled = true
  server.process.kill('SIGTERM')
  await Promise.all(clients)
  const [code] = await exited
  return { outcomes, code }
}

const failure = (answer: NodeJS.ErrnoException): string => `${answer.code ?? ''} ${answer.message}`

t.test('SIGTERM during keep-alive load: no request fails, no connection is reset, every client is told to close', async (t) => {
  const server = await start({})
  // Each client sends one request after another, as a balancer does, and stops once a response says Connection: close.
  let toldToClose = 0
  const { outcomes, code } = await throughShutdown(server, 10, async (outcome, agent, signalled) => {
    for (;;) {
      const answer = await send(`${server.url}/health/live`, agent)
      if (answer instanceof Error || answer.status !== 200) {
        outcome.failed.push(answer instanceof Error ? failure(answer) : String(answer.status))
        return
      }
      outcome.ok += 1
      if (answer.connection === 'close') {
        if (!signalled()) outcome.failed.push('told to close before the signal')
        toldToClose += 1
        return
      }
    }
  })
  t.same(outcomes.flatMap((outcome) => outcome.failed), [], 'no request failed')
  t.ok(toldToClose === outcomes.length && outcomes.every((outcome) => outcome.ok > 1), 'every client served, then told to close')
  t.equal(code, 0)
})

// As a load generator or a pool does: a client told to close opens a new connection for its next request. Once
// shutdown begins, no new connection is taken (refused: nothing was sent, a client may send it elsewhere), so none
// is closed under a request it carries.
t.test('SIGTERM during write load from clients that connect again: no request sent is reset, new connections are refused', async (t) => {
  // Each client writes until the shutdown: a quota it never reaches.
  const server = await start({ ACCOUNT_QUOTA_KIB: '1048576' })
  const body = JSON.stringify({ name: 'written while shutting down', description: 'd'.repeat(2000) })
  const { outcomes, code } = await throughShutdown(server, 64, async (outcome, agent, signalled) => {
    const registered = await fetch(`${server.url}/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(newUser({ role: 'contributor' })) })
    const { accessToken } = await registered.json() as { accessToken: string }
    const headers = { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json' }
    for (;;) {
      const answer = await send(`${server.url}/v1/items`, agent, { method: 'POST', headers }, body)
      // Refused, or reset as it connects (the listener closed with it in its backlog): nothing was sent.
      if (answer instanceof Error && answer.syscall === 'connect' && signalled()) return
      if (answer instanceof Error || answer.status !== 201) {
        outcome.failed.push(answer instanceof Error ? failure(answer) : String(answer.status))
        return
      }
      outcome.ok += 1
    }
  })
  t.same(outcomes.flatMap((outcome) => outcome.failed), [], 'no request failed once sent')
  t.equal(code, 0)
})

t.test('clients stuck in their headers or body do not hold the shutdown: exit 0 within SHUTDOWN_TIMEOUT_MS', async (t) => {
  const server = await start({ SHUTDOWN_TIMEOUT_MS: '3000' })
  const { port } = new URL(server.url)
  const stuck = (request: string): Socket => {
    const socket = connect(Number(port), '127.0.0.1').on('error', () => {})
    socket.write(request)
    return socket
  }
  const inHeaders = stuck('GET /health/live HTTP/1.1\r\nHost: localhost\r\n')
  const inBody = stuck('POST /v1/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email"')
  await sleep(200)
  const closedByServer = Promise.all([once(inHeaders, 'close'), once(inBody, 'close')])
  const exited = once(server.process, 'exit')
  server.process.kill('SIGTERM')
  // Past SHUTDOWN_TIMEOUT_MS close-with-grace exits 1: 0 says the shutdown ended within it, by the process's own clock
  // (a wall-clock bound here would also count the exit itself, which coverage makes slow on a busy machine).
  const [code] = await exited
  t.equal(code, 0, 'exited 0: the stuck clients did not hold the shutdown past SHUTDOWN_TIMEOUT_MS')
  await closedByServer
  t.pass('the server closed both stuck connections')
})

// The README's `npm start`, in a copy of the sources of its own (the package's build, which other tests make, is in
// the repository's dist/): stopped as a supervisor stops it, by the pid it started.
t.test('a bad setting stops the start with one line naming the variable', async (t) => {
  const { code, stderr } = await failedStart({ PORT: 'eighty' })
  t.equal(code, 1)
  t.match(stderr, /^Invalid configuration: PORT must be an integer from 0 to 65535, got "eighty"$/m)
})

t.test('a failed listen says why in one line on standard error and exits 1, at any log level', async (t) => {
  const taken = createServer()
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { taken.close() })
  const { port } = taken.address() as AddressInfo
  // The starts run side by side: each is a process of its own.
  const levels = ['silent', 'error', 'info']
  const [badHost, opsInUse, ...inUse] = await Promise.all([failedStart({ HOST: '999.1.1.1', LOG_LEVEL: 'silent' }),
    failedStart({ PORT: '0', OPS_PORT: String(port), LOG_LEVEL: 'silent' }),
    ...levels.map(async (LOG_LEVEL) => await failedStart({ PORT: String(port), LOG_LEVEL }))])
  for (const [index, started] of inUse.entries()) {
    t.equal(started.code, 1)
    t.match(started.stderr, new RegExp(`^Cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE.*$`, 'm'), `port in use, LOG_LEVEL=${levels[index]}`)
  }
  t.equal(badHost.code, 1)
  t.match(badHost.stderr, /^Cannot listen on 999\.1\.1\.1:3000: .*(ENOTFOUND|EAI_AGAIN|EADDRNOTAVAIL).*$/m)
  t.equal(opsInUse.code, 1)
  t.match(opsInUse.stderr, new RegExp(`^Cannot listen on 127\\.0\\.0\\.1:${port} \\(OPS_HOST:OPS_PORT, the operations API\\): .*EADDRINUSE.*$`, 'm'), 'the operations port named when it is the one taken')
})

t.test('a flood of maximum-size items from several accounts cannot exhaust a small heap: writes shed, reads go on', async (t) => {
  // The items fill the heap only where the store is the heap. The accounts' quotas are set past the heap, so that what
  // is tested is shedding, the last defence, which a sized deployment's quotas refuse writes well before.
  const room = { ACCOUNT_QUOTA_KIB: '1048576' }
  const server = await start({ STORE: 'memory', RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '100', RATE_LIMIT_WRITES: '100000', MAX_ITEMS_PER_USER: '100000', MAX_HEAP_USED_MIB: '128', ...room },
    { nodeOptions: ['--max-old-space-size=160'] })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const post = async (path: string, body: unknown, token?: string): Promise<Response> => await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: JSON.stringify(body)
  })
  // What the start leaves for the collector can keep the heap over the line for a moment: sign-ups shed then are
  // tried again after the next memory sample.
  const signUp = async (): Promise<string> => {
    for (let attempt = 0; attempt < 40; attempt += 1) {
      const response = await post('/v1/auth/register', newUser())
      if (response.status === 201) return ((await response.json()) as { accessToken: string }).accessToken
      t.equal(response.status, 503, 'a sign-up is only shed, never refused')
      await sleep(250)
    }
    throw new Error('the heap stayed over the line for 10 s after the start')
  }
  const tokens: string[] = []
  for (let account = 0; account < 8; account += 1) tokens.push(await signUp())
  // The largest item the contract allows, in characters that take two bytes each in V8's heap: about 42 KB (docs/security.md).
  const item = { name: 'n'.repeat(200), description: '\u{1F600}'.repeat(10_000) }
  const statuses = new Map<number, number>()
  const reads: number[] = []
  let shed = false
  // 8 accounts, 8 writes at a time with a read beside them, until writes are shed (a 160 MB heap died after
  // 4 317 such items before).
  for (let round = 0; round < 2000 && !shed; round += 1) {
    const [read, ...answers] = await Promise.all([
      fetch(`${server.url}/v1/items?pageSize=5`, { headers: { authorization: `Bearer ${tokens[0] ?? ''}` } }).then((response) => response.status),
      ...tokens.map(async (token) => (await post('/v1/items', item, token)).status)
    ])
    reads.push(read ?? 0)
    for (const status of answers) statuses.set(status, (statuses.get(status) ?? 0) + 1)
    shed = answers.includes(503)
  }
  t.ok(shed, `writes were shed: ${JSON.stringify(Object.fromEntries(statuses))}`)
  t.ok((statuses.get(201) ?? 0) > 100, 'after more than a hundred were stored')
  t.same([...statuses.keys()].filter((status) => status !== 201 && status !== 503), [], 'every write was stored or shed')
  t.same(reads.filter((status) => status !== 200), [], `all ${reads.length} reads beside the writes answered 200`)
  const list = await fetch(`${server.url}/v1/items?pageSize=5`, { headers: { authorization: `Bearer ${tokens[0] ?? ''}` } })
  t.equal(list.status, 200, 'the list answers while writes are shed (the stored items keep the heap over the line)')
  t.equal((await fetch(`${server.url}/health/live`)).status, 200, 'and so does liveness')
  // What frees memory is never shed: the owner's deletes are served while the heap is over the line.
  const owned = await (await fetch(`${server.url}/v1/items?pageSize=30`, { headers: { authorization: `Bearer ${tokens[0] ?? ''}` } })).json() as { data: Array<{ id: string, contributorId: string }> }
  const deletes = await Promise.all(owned.data.map(async ({ id }) => (await fetch(`${server.url}/v1/items/${id}`, {
    method: 'DELETE', headers: { authorization: `Bearer ${tokens[0] ?? ''}` }
  })).status))
  t.ok(deletes.length > 0 && deletes.every((status) => status === 204 || status === 403), `deletes while shedding: ${deletes.join(' ')}`)
  t.ok(deletes.includes(204), 'the owner\'s own deletes were served')
  t.equal(server.process.exitCode, null, 'the process is alive')
})

t.test('a start loads only what its configuration uses: no Redis client, HTTP client or metrics library it was not asked for', { skip: await redisSkip() }, async (t) => {
  const OPTIONAL = ['ioredis', 'undici', 'prom-client']
  const loadedBy = async (env: NodeJS.ProcessEnv): Promise<string[]> => {
    const server = await start(env, { nodeOptions: ['--import', './test/fixtures/loaded-packages.mjs'] })
    t.equal((await fetch(`${server.url}/health/ready`)).status, 200)
    server.process.kill('SIGTERM')
    await once(server.process, 'exit')
    const packages = JSON.parse(/loaded packages: (.*)/.exec(server.output())?.[1] ?? 'null') as string[]
    return OPTIONAL.filter((name) => packages.includes(name))
  }
  t.same(await loadedBy({ STORE: 'memory' }), [], 'the memory store, no subscriber, no OPS_PORT')
  const everything = {
    STORE: 'redis',
    REDIS_KEY_PREFIX: redisKeyPrefix(t),
    OPS_PORT: '0',
    OPS_TOKEN: 'an-operations-token-of-at-least-32-characters',
    WEBHOOKS: JSON.stringify([{ url: 'http://127.0.0.1:9/hook', secret: `whsec_${Buffer.alloc(32, 1).toString('base64')}` }])
  }
  t.same(await loadedBy(everything), OPTIONAL, 'Redis, a subscriber and the operations API')
})
