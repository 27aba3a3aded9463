import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig, withDefaults } from '../../src/config/config.js'
import { build, buildTestApp, captureLogs, TEST_JWT_SECRET } from '../support/app.js'

t.test('defaults make a working development configuration', async (t) => {
  const config = loadConfig({})
  t.match(config, {
    environment: 'development',
    host: '127.0.0.1',
    port: 3000,
    logLevel: 'info',
    jwt: { secretGenerated: true, accessTokenTtlSeconds: 900 },
    refreshTokenTtlSeconds: 604800,
    bodyLimit: 65536,
    rateLimits: { login: { max: 10, windowSeconds: 60 } }
  })
  t.ok(Buffer.byteLength(config.jwt.secret) >= 32, 'a generated secret is at least 32 bytes')
  t.not(loadConfig({}).jwt.secret, config.jwt.secret, 'and random')
})

t.test('a bad value stops the start with a message naming the variable', async (t) => {
  const bad: Record<string, string> = {
    PORT: 'eighty',
    HOST: '',
    BODY_LIMIT_BYTES: '1e3',
    SHUTDOWN_TIMEOUT_MS: ' ',
    ACCESS_TOKEN_TTL_SECONDS: '0',
    JWT_SECRET: 'too short',
    RATE_LIMIT: 'maybe',
    LOG_LEVEL: 'loud'
  }
  for (const [name, value] of Object.entries(bad)) {
    t.throws(() => loadConfig({ [name]: value }), { name: 'ConfigError', message: new RegExp(`^Invalid configuration: ${name} must `) }, `${name}=${value}`)
  }
})

t.test('production refuses to start without JWT_SECRET', async (t) => {
  t.throws(() => loadConfig({ NODE_ENV: 'production' }), { message: /JWT_SECRET is required/ })
  t.equal(loadConfig({ NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32) }).jwt.secretGenerated, false)
})

t.test('RATE_LIMIT=off switches every limit off', async (t) => {
  t.equal(loadConfig({ RATE_LIMIT: 'off' }).rateLimits, null)
})

t.test('a generated secret is announced with a warning at startup', async (t) => {
  const { lines, logStream } = captureLogs()
  // Only the memory store runs without a secret.
  await build(t, { STORE: 'memory', JWT_SECRET: undefined, LOG_LEVEL: 'warn' }, { logStream })
  t.match(lines.join(''), /JWT_SECRET is not set/)
})

t.test('the store: memory by default; Redis with its URL and key prefix, and only with a shared JWT_SECRET', async (t) => {
  const storeDefaults = { accounts: { accounts: 1000, quotaBytes: 128 * 1024 }, idempotencyKeys: { ttlMs: 86_400_000, perUser: 1000 } }
  t.same(loadConfig({}).store, { kind: 'memory', redisUrl: 'redis://127.0.0.1:6379', redisSentinel: undefined, redisReplicasToAcknowledge: 0, redisKeyPrefix: 'items-service:', maxItemsPerUser: 1000, ...storeDefaults })
  const secret = { JWT_SECRET: 's'.repeat(32) }
  t.same(loadConfig({ ...secret, STORE: 'redis', REDIS_URL: 'rediss://user:pw@redis.internal:6380/2', REDIS_KEY_PREFIX: 'catalogue:' }).store,
    {
      kind: 'redis',
      redisUrl: 'rediss://user:pw@redis.internal:6380/2',
      redisSentinel: undefined,
      redisReplicasToAcknowledge: 0,
      redisKeyPrefix: 'catalogue:',
      maxItemsPerUser: 1000,
      ...storeDefaults
    }, 'on Redis, the budget is left to its maxmemory')
  const sentinel = loadConfig({ ...secret, STORE: 'redis', REDIS_SENTINELS: 'sentinel-a:26379, 10.0.0.2:26380,[::1]:26381', REDIS_SENTINEL_PASSWORD: 'pw' }).store
  t.same([sentinel.redisSentinel, sentinel.redisReplicasToAcknowledge], [{
    sentinels: [{ host: 'sentinel-a', port: 26379 }, { host: '10.0.0.2', port: 26380 }, { host: '::1', port: 26381 }],
    name: 'mymaster',
    password: 'pw'
  }, 1], 'with Sentinel, a write waits for one replica by default')
  t.same([loadConfig({ ...secret, STORE: 'redis', REDIS_SENTINELS: '' }).store.redisSentinel, loadConfig({ ...secret, STORE: 'redis', REDIS_SENTINELS: '' }).store.redisReplicasToAcknowledge],
    [undefined, 0], 'set empty (as compose passes it): one server')
  t.equal(loadConfig({ ...secret, STORE: 'redis', REDIS_SENTINELS: 'a:1', REDIS_REPLICAS_TO_ACKNOWLEDGE: '0' }).store.redisReplicasToAcknowledge, 0)
  t.equal(loadConfig({ ...secret, STORE: 'redis', REDIS_REPLICAS_TO_ACKNOWLEDGE: '2' }).store.redisReplicasToAcknowledge, 2, 'and on one server as asked')
  for (const value of ['a', 'a:', 'a:0', 'a:65536', 'a:1,,b:2', 'a b:1']) {
    t.throws(() => loadConfig({ ...secret, REDIS_SENTINELS: value }), { name: 'ConfigError', message: /^Invalid configuration: REDIS_SENTINELS must be comma-separated host:port pairs/ }, value)
  }
  t.same(loadConfig({ IDEMPOTENCY_KEY_TTL_SECONDS: '3600', MAX_IDEMPOTENCY_KEYS_PER_USER: '10' }).store.idempotencyKeys, { ttlMs: 3_600_000, perUser: 10 })
  t.same(loadConfig({ MAX_ACCOUNTS: '5000', ACCOUNT_QUOTA_KIB: '128' }).store.accounts, { accounts: 5000, quotaBytes: 128 * 1024 })
  t.same(loadConfig({ MAX_ACCOUNTS: '5000' }).rateLimits?.registrations, { max: 200, windowSeconds: 3600 }, 'registrations to the service: a 25th of MAX_ACCOUNTS an hour')
  t.same(loadConfig({ MAX_ACCOUNTS: '10' }).rateLimits?.registrations, { max: 1, windowSeconds: 3600 }, 'one at least')
  t.equal(loadConfig({ RATE_LIMIT: 'off' }).rateLimits, null, 'RATE_LIMIT=off limits no registration')
  const removed = loadConfig({ STORE_CAPACITY_MIB: '64', ACCOUNT_FLOOR_KIB: '64', ACCOUNT_SESSIONS_KIB: '48', ACCOUNT_CEILING_MIB: '2', ACCOUNT_FLOORS_PERCENT: '25', REGISTRATION_ROOM_SECONDS: '0', SANDBOX_CAPACITY_KIB: '512' })
  t.same(removed.warnings, [
    ...['STORE_CAPACITY_MIB', 'ACCOUNT_FLOORS_PERCENT', 'ACCOUNT_FLOOR_KIB', 'ACCOUNT_SESSIONS_KIB', 'ACCOUNT_CEILING_MIB'].map((name) =>
      `${name} is no longer read: MAX_ACCOUNTS and ACCOUNT_QUOTA_KIB bound what the store keeps for accounts (docs/capacity.md)`),
    'REGISTRATION_ROOM_SECONDS is no longer read: registrations are limited to a 25th of MAX_ACCOUNTS an hour (docs/capacity.md)',
    'SANDBOX_CAPACITY_KIB is no longer read: SANDBOX_ACCOUNTS, each within ACCOUNT_QUOTA_KIB (docs/capacity.md)'
  ], 'a setting no longer read is named at start, with what took its place')
  t.throws(() => loadConfig({ STORE: 'redis' }), { message: 'Invalid configuration: JWT_SECRET is required when STORE is redis (every instance must share it)' })
  for (const [name, value] of [['STORE', 'postgres'], ['REDIS_URL', 'http://127.0.0.1:6379'], ['REDIS_URL', 'redis://'], ['REDIS_URL', 'redis://a b'], ['REDIS_KEY_PREFIX', '']]) {
    t.throws(() => loadConfig({ ...secret, [name!]: value }), { name: 'ConfigError', message: new RegExp(`^Invalid configuration: ${name} must `) }, `${name}=${value}`)
  }
})

t.test('settings laid over the defaults keep the defaults of what they leave out, and a part they turn on keeps its own defaults', async (t) => {
  t.same(withDefaults({ store: { accounts: { accounts: 7 } } }).store.accounts, { accounts: 7, quotaBytes: 128 * 1024 }, 'a bound given in part keeps the other')
  t.same(withDefaults({ operations: { port: 0 } }).operations, { host: '127.0.0.1', port: 0, token: undefined }, 'the operations API on loopback')
  t.same(withDefaults({ tracing: { serviceName: 'named' } }).tracing, { protocol: 'http/protobuf', serviceName: 'named' })
  t.equal(withDefaults({}).operations, undefined, 'off unless turned on')
})

t.test('tracing: off unless an OTLP endpoint is set, for all signals or for traces alone; http/protobuf by default', async (t) => {
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_SERVICE_NAME: 'named' }).tracing, undefined)
  t.same(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).tracing, { protocol: 'http/protobuf', serviceName: 'items-service' })
  t.same(loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_SERVICE_NAME: 'named' }).tracing,
    { protocol: 'http/json', serviceName: 'named' })
})

t.test('TRUST_PROXY: off by default; addresses, or true and a number of hops only with TRUST_PROXY_UNSAFE=1', async (t) => {
  t.equal(loadConfig({}).trustProxy, false)
  for (const anyClient of ['true', '2']) {
    t.throws(() => loadConfig({ TRUST_PROXY: anyClient }), { message: /^Invalid configuration: TRUST_PROXY=true or a hop count lets any client choose its address/ }, anyClient)
  }
  const unsafe = { TRUST_PROXY_UNSAFE: '1' }
  t.equal(loadConfig({ ...unsafe, TRUST_PROXY: 'true' }).trustProxy, true)
  t.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, false)
  t.equal(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).trustProxy, '10.0.0.0/8,127.0.0.1')
  const hops = loadConfig({ ...unsafe, TRUST_PROXY: '2' }).trustProxy
  t.ok(typeof hops === 'function' && hops('10.0.0.1', 1) && !hops('10.0.0.1', 2), 'trusts the nearest two hops')
  t.equal(loadConfig({ TRUST_PROXY: 'loopback,::1/128' }).trustProxy, 'loopback,::1/128')
  for (const bad of ['yes please', '10.0.0.0/33', '::/129', 'proxy.internal', '10.0.0.1/8/8', 'nonsense/8', '10.0.0.1,']) {
    t.throws(() => loadConfig({ TRUST_PROXY: bad }), { message: /^Invalid configuration: TRUST_PROXY must be true, false/ }, bad)
  }
})

t.test('behind a trusted proxy, rate limits key on the client address X-Forwarded-For gives; otherwise on the peer', async (t) => {
  const register = async (api: Awaited<ReturnType<typeof build>>, client: string): Promise<number> =>
    (await api.call('registerUser', { body: { email: 'not an email' }, headers: { 'x-forwarded-for': client }, remoteAddress: '10.0.0.1' })).statusCode
  const trusting = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '1', TRUST_PROXY: '10.0.0.1' })
  t.same([await register(trusting, '203.0.113.1'), await register(trusting, '203.0.113.1'), await register(trusting, '203.0.113.2')], [400, 429, 400],
    'each client has its own limit')
  t.same([await register(trusting, '203.0.113.3, 203.0.113.4'), await register(trusting, '198.51.100.9, 203.0.113.4')], [400, 429],
    'the rightmost address the trusted proxy did not add is the client: what a client writes to its left is not')
  t.same([await register(trusting, 'garbage-1'), await register(trusting, 'garbage-2')], [400, 429],
    'what is no address is keyed by the peer, not taken as a new client')
  const untrusting = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '1' })
  t.same([await register(untrusting, '203.0.113.1'), await register(untrusting, '203.0.113.2')], [400, 429],
    'a forged header changes nothing: every request is the proxy\'s')
  const peerless = async (remoteAddress: string): Promise<number> =>
    (await untrusting.call('registerUser', { body: { email: 'not an email' }, remoteAddress })).statusCode
  t.same([await peerless('no-address'), await peerless('no-address'), await peerless('other-no-address')], [400, 429, 400],
    'a peer that is no address either is keyed as it is')
})

t.test('behind a trusted proxy, 200 X-Forwarded-For addresses of one IPv6 /64 share one budget; two /64s do not', async (t) => {
  const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '5', TRUST_PROXY: '10.0.0.1' })
  const register = async (client: string): Promise<number> =>
    (await api.call('registerUser', { body: { email: 'not an email' }, headers: { 'x-forwarded-for': client }, remoteAddress: '10.0.0.1' })).statusCode
  const oneNetwork = []
  for (let host = 1; host <= 200; host += 1) oneNetwork.push(await register(`2001:db8:0:1:${host.toString(16)}::${host.toString(16)}`))
  t.same(oneNetwork, [...Array<number>(5).fill(400), ...Array<number>(195).fill(429)])
  t.equal(await register('2001:db8:0:2::1'), 400, 'the next /64 has a budget of its own')
})

t.test('CLIENT_IPV6_PREFIX_LENGTH sets how much of an IPv6 address is one client; an IPv4-mapped address is its IPv4 one', async (t) => {
  const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '1', CLIENT_IPV6_PREFIX_LENGTH: '48' })
  const register = async (remoteAddress: string): Promise<number> =>
    (await api.call('registerUser', { body: { email: 'not an email' }, remoteAddress })).statusCode
  t.same([await register('2001:db8:1:1::1'), await register('2001:db8:1:2::1'), await register('2001:db8:2::1')], [400, 429, 400])
  t.same([await register('198.51.100.7'), await register('::ffff:198.51.100.7')], [400, 429])
  t.throws(() => loadConfig({ CLIENT_IPV6_PREFIX_LENGTH: '129' }), { message: /^Invalid configuration: CLIENT_IPV6_PREFIX_LENGTH must be an integer from 1 to 128/ })
})

t.test('limits apply to the operations the contract says, never to a route added beside them, whatever its config says', async (t) => {
  const app = await buildTestApp(t, { RATE_LIMIT: 'on', RATE_LIMIT_REFRESH: '1' })
  app.route({ method: 'GET', url: '/probe', config: { operationId: 'refreshTokens' }, handler: async () => ({}) })
  const probes = [await app.inject('/probe'), await app.inject('/probe')]
  t.same(probes.map((probe) => probe.statusCode), [200, 200])
  t.equal(probes[0]?.headers['ratelimit-policy'], undefined)
})

t.test('webhooks: WEBHOOKS or WEBHOOKS_FILE, every entry validated, secrets never quoted', async (t) => {
  const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`
  const config = loadConfig({ WEBHOOKS: JSON.stringify([{ url: 'http://127.0.0.1:9999/hook', secret, channels: ['items.item.added'] }, { url: 'https://example.com/all', secret }]) })
  t.match(config.webhooks, {
    subscriptions: [
      { url: 'http://127.0.0.1:9999/hook', secret, channels: ['items.item.added'], id: /^[\w-]{16}$/ },
      { url: 'https://example.com/all', channels: ['items.item.added', 'items.item.edited', 'items.item.removed'] }
    ],
    timeoutMs: 10_000,
    retryDelaysMs: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
    reclaimAfterMs: 60_000
  })
  t.not(config.webhooks.subscriptions[0]?.id, config.webhooks.subscriptions[1]?.id)
  t.same(loadConfig({}).webhooks.subscriptions, [], 'none by default')

  const entry = (fields: Record<string, unknown>): string => JSON.stringify([{ url: 'http://127.0.0.1:9999/ok', secret }, fields])
  const bad: Array<[string, RegExp]> = [
    ['[', /^Invalid configuration: WEBHOOKS: is not valid JSON/],
    ['{}', /^Invalid configuration: WEBHOOKS: must be a JSON array/],
    ['["http://example.com"]', /^Invalid configuration: WEBHOOKS\[0\]: must be an object with url, secret/],
    [JSON.stringify(Array.from({ length: 17 }, (_, index) => ({ url: `http://example.com/${index}`, secret }))), /^Invalid configuration: WEBHOOKS: may list at most 16/],
    [entry({ url: 'ftp://example.com', secret }), /^Invalid configuration: WEBHOOKS\[1\]: url must be an http/],
    [entry({ url: 'not a url', secret }), /^Invalid configuration: WEBHOOKS\[1\]: url must be/],
    [entry({ url: 'http://example.com', secret: 'whsec_c2hvcnQ=' }), /^Invalid configuration: WEBHOOKS\[1\]: secret must be whsec_ followed by 24 to 64 bytes/],
    [entry({ url: 'http://example.com', secret: secret.replace('whsec_', '') }), /WEBHOOKS\[1\]: secret must be/],
    [entry({ url: 'http://example.com', secret, channels: ['items.item.sold'] }), /WEBHOOKS\[1\]: channels must be a non-empty list of items.item.added/],
    [entry({ url: 'http://example.com', secret, channels: [] }), /WEBHOOKS\[1\]: channels must be/],
    [entry({ url: 'http://example.com', secret, channel: ['items.item.added'] }), /WEBHOOKS\[1\]: has unknown field\(s\) channel/],
    [entry({ url: 'http://127.0.0.1:9999/ok', secret }), /WEBHOOKS\[1\]: url is already subscribed by \[0\]/],
    [entry({ url: 'https://hook-user:hook-password@example.com/', secret }), /^Invalid configuration: WEBHOOKS\[1\]: url must not hold credentials \(user:password@\)/],
    // Unquoted, the secret is where V8's own message would quote the text around the unexpected token.
    [`[{"url": "http://example.com", "secret":${secret}}]`, /^Invalid configuration: WEBHOOKS: is not valid JSON \(at line 1, column 41\)$/]
  ]
  for (const [value, message] of bad) {
    const error = t.throws(() => loadConfig({ WEBHOOKS: value }), { name: 'ConfigError', message }, value)
    const said = String((error as Error | undefined)?.message)
    t.ok(!said.includes(secret.slice(6)) && !said.includes('hook-password'), 'no secret is in the message')
  }

  const file = join(t.testdir(), 'webhooks.json')
  writeFileSync(file, JSON.stringify([{ url: 'http://127.0.0.1:9999/from-file', secret }]))
  t.equal(loadConfig({ WEBHOOKS_FILE: file }).webhooks.subscriptions[0]?.url, 'http://127.0.0.1:9999/from-file')
  t.throws(() => loadConfig({ WEBHOOKS_FILE: join(t.testdir(), 'missing.json') }), { message: /^Invalid configuration: WEBHOOKS_FILE cannot be read: ENOENT/ })
  t.throws(() => loadConfig({ WEBHOOKS_FILE: file, WEBHOOKS: '[]' }), { message: 'Invalid configuration: set WEBHOOKS or WEBHOOKS_FILE, not both' })
  writeFileSync(file, '[{"url": "http://x"}]')
  t.throws(() => loadConfig({ WEBHOOKS_FILE: file }), { message: new RegExp(`^Invalid configuration: WEBHOOKS_FILE \\(${file}\\)\\[0\\]: secret must be`) })

  t.same(loadConfig({ WEBHOOK_RETRY_DELAYS_MS: '10, 20,30', WEBHOOK_TIMEOUT_MS: '500', WEBHOOK_RECLAIM_AFTER_MS: '1000' }).webhooks,
    { subscriptions: [], retryDelaysMs: [10, 20, 30], timeoutMs: 500, reclaimAfterMs: 1000 })
  for (const [name, value] of [['WEBHOOK_RETRY_DELAYS_MS', '5s'], ['WEBHOOK_RETRY_DELAYS_MS', ''], ['WEBHOOK_RETRY_DELAYS_MS', '1,,2'], ['WEBHOOK_TIMEOUT_MS', '50']] as const) {
    t.throws(() => loadConfig({ [name]: value }), { name: 'ConfigError', message: new RegExp(`^Invalid configuration: ${name} must `) }, `${name}=${value}`)
  }
  t.throws(() => loadConfig({ WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_RECLAIM_AFTER_MS: '2000' }),
    { message: 'Invalid configuration: WEBHOOK_RECLAIM_AFTER_MS must be longer than WEBHOOK_TIMEOUT_MS' })
})

t.test('CORS_ORIGINS: none by default, else origins as a browser sends them', async (t) => {
  t.same(loadConfig({}).corsOrigins, [])
  t.same(loadConfig({ CORS_ORIGINS: 'http://localhost:5173, https://app.example.com' }).corsOrigins, ['http://localhost:5173', 'https://app.example.com'])
  for (const value of ['localhost:5173', 'http://localhost:5173/', 'https://app.example.com/path', '*', '']) {
    t.throws(() => loadConfig({ CORS_ORIGINS: value }), { name: 'ConfigError', message: /^Invalid configuration: CORS_ORIGINS must be comma-separated origins/ }, value)
  }
})

t.test('JWT_VERIFY_SECRETS: none by default, else secrets as long as JWT_SECRET must be', async (t) => {
  t.same(loadConfig({}).jwt.verifySecrets, [])
  const [one, two] = ['a'.repeat(32), 'b'.repeat(48)]
  t.same(loadConfig({ JWT_VERIFY_SECRETS: `${one}, ${two}` }).jwt.verifySecrets, [one, two])
  for (const value of ['short', `${one},`, '']) {
    t.throws(() => loadConfig({ JWT_VERIFY_SECRETS: value }), { name: 'ConfigError', message: /^Invalid configuration: JWT_VERIFY_SECRETS must be comma-separated secrets of at least 32 characters each$/ }, value)
  }
})

t.test('the operations API listens on loopback unless OPS_HOST says otherwise; elsewhere without OPS_TOKEN a production start stops', async (t) => {
  const token = 'an-operations-token-of-16+'
  t.equal(loadConfig({ OPS_PORT: '9464', HOST: '0.0.0.0' }).operations?.host, '127.0.0.1', 'not on HOST: loopback by default')
  for (const loopback of ['127.0.0.1', '127.0.0.2', '::1', 'localhost']) {
    t.same(loadConfig({ OPS_PORT: '9464', OPS_HOST: loopback }).warnings, [], `${loopback} is this machine only`)
  }
  t.same(loadConfig({ OPS_PORT: '9464', OPS_HOST: '0.0.0.0', OPS_TOKEN: token }).operations, { host: '0.0.0.0', port: 9464, token })
  t.same(loadConfig({ OPS_PORT: '9464', OPS_HOST: '0.0.0.0' }).warnings,
    ['OPS_HOST 0.0.0.0 is not loopback and OPS_TOKEN is not set: whoever reaches OPS_PORT may read the metrics and redeliver dead letters'])
  t.throws(() => loadConfig({ NODE_ENV: 'production', JWT_SECRET: TEST_JWT_SECRET, OPS_PORT: '9464', OPS_HOST: '10.0.0.5' }), {
    name: 'ConfigError',
    message: 'Invalid configuration: OPS_HOST 10.0.0.5 is not loopback: set OPS_TOKEN, or the operations API is open to whoever reaches it'
  })
  t.same(loadConfig({ OPS_HOST: '0.0.0.0' }).warnings, [], 'no operations API, nothing to warn of')
})

t.test('OPS_PORT equal to PORT stops the start in one line, before anything listens', async (t) => {
  t.throws(() => loadConfig({ PORT: '3000', OPS_PORT: '3000' }), {
    name: 'ConfigError',
    message: 'Invalid configuration: OPS_PORT must differ from PORT (3000): the operations API has a server of its own'
  })
  t.equal(loadConfig({ PORT: '0', OPS_PORT: '0' }).operations?.port, 0, 'both picked free, so never the same')
})

t.test('SANDBOXES=on needs the operations API, or the start stops in one line; on either store', async (t) => {
  t.throws(() => loadConfig({ SANDBOXES: 'on' }), {
    name: 'ConfigError',
    message: 'Invalid configuration: SANDBOXES=on needs OPS_PORT: sandboxes are created on the operations API'
  })
  t.same(loadConfig({ SANDBOXES: 'on', OPS_PORT: '0', STORE: 'redis', JWT_SECRET: 'a'.repeat(32) }).sandboxes?.limit, 100, 'on Redis too')
  t.same(loadConfig({ SANDBOXES: 'on', OPS_PORT: '0', SANDBOX_IDLE_SECONDS: '60' }).sandboxes, { limit: 100, idleMs: 60_000, accounts: 10, quotaBytes: 128 * 1024 })
  t.equal(loadConfig({}).sandboxes, undefined, 'off by default')
})

t.test('a setting under the name it had before is still read, with a deprecation line at start; the new name wins', async (t) => {
  const config = loadConfig({ SHUTDOWN_TIMEOUT: '4000', ACCESS_TOKEN_TTL: '60', MAX_HEAP_USED: '64' })
  t.equal(config.shutdownTimeoutMs, 4000)
  t.equal(config.jwt.accessTokenTtlSeconds, 60)
  t.equal(config.maxHeapUsedBytes, 64 * 1024 * 1024)
  t.same(config.warnings, [
    'ACCESS_TOKEN_TTL is deprecated and will be removed: set ACCESS_TOKEN_TTL_SECONDS instead',
    'SHUTDOWN_TIMEOUT is deprecated and will be removed: set SHUTDOWN_TIMEOUT_MS instead',
    'MAX_HEAP_USED is deprecated and will be removed: set MAX_HEAP_USED_MIB instead'
  ])
  const both = loadConfig({ SHUTDOWN_TIMEOUT: '4000', SHUTDOWN_TIMEOUT_MS: '5000' })
  t.equal(both.shutdownTimeoutMs, 5000, 'the new name wins')
  t.same(both.warnings, [], 'and nothing is said')
  t.throws(() => loadConfig({ BODY_LIMIT: '12' }), { message: 'Invalid configuration: BODY_LIMIT must be an integer from 1024 to 9007199254740991, got "12"' },
    'an error names the variable as it was set')
  const { lines, logStream } = captureLogs()
  await build(t, { LOG_LEVEL: 'warn', RATE_LIMIT_WINDOW: '30' }, { logStream })
  t.match(lines.map((line) => JSON.parse(line) as { level: number, msg: string }), [{ level: 40, msg: 'RATE_LIMIT_WINDOW is deprecated and will be removed: set RATE_LIMIT_WINDOW_SECONDS instead' }], 'one warning line')
})

t.test('an integer setting is whole digits: nothing else passes for a number', async (t) => {
  for (const value of ['0x10', ' 80', '80 ', '1e3', '8.0', '', '99999999999999999']) {
    t.throws(() => loadConfig({ PORT: value }), { message: `Invalid configuration: PORT must be an integer from 0 to 65535, got "${value}"` }, JSON.stringify(value))
  }
  t.equal(loadConfig({ PORT: '0' }).port, 0)
})

t.test('docs/configuration.md\'s table is the schema\'s (npm run docs:config writes it)', async (t) => {
  const { readFileSync } = await import('node:fs')
  const { withCurrentTable, CONFIGURATION_PAGE } = await import('../../scripts/config-table.js')
  const page = readFileSync(CONFIGURATION_PAGE, 'utf8')
  t.equal(page, withCurrentTable(page))
})
