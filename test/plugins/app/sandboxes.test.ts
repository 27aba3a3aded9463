// Sandboxes (SANDBOXES=on): created and deleted on the operations API, each an isolated catalogue served under
// /sandboxes/{sandboxId} on the public port, tried as an attacker would (guessed ids, tokens and keys carried across),
// and bounded in number, room and idle lifetime. Every answer is checked against its contract. Each promise on both
// stores, whatever store the run names (Redis is required under CI=true); and on Redis, as two instances serve one
// sandbox.
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import type { operations } from '../../../generated/operations/openapi.js'
import { freePort } from '../../../harness/net.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { type Receiver, startReceiver } from '../../../harness/webhook-receiver.js'
import { Api, newUser } from '../../support/api.js'
import { build, captureLogs } from '../../support/app.js'
import { opsCall } from '../../support/ops.js'
import { ownRedis, redisKeyPrefix, SILENT_LOGGER } from '../../support/redis.js'
import { ANY_COMMIT, answerTo, FAULT_OUTCOMES, type Marked, REDIS_FAULTS, type RedisProxy, redisProxy, TRUSTING_HEARTBEAT } from '../../support/redis-proxy.js'
import { connectRedisStore } from '../../../src/store/redis/connection.js'
import { redisKeys, type RedisKeys } from '../../../src/store/redis/keys.js'
import { sandboxScripts } from '../../../src/store/redis/sandbox-registry.js'
import { HANG_MS, until } from '../../support/wait.js'
import { onEachStore, redisSkipped, withSandboxes } from '../../support/sandboxes.js'

type Sandbox = operations['createSandbox']['responses'][201]['content']['application/json']

/**
 * An instance with sandboxes on Redis, met through a proxy that injects the faults a test arms it with. Given a key
 * prefix, its store is built with it and TRUSTING_HEARTBEAT, for a test that holds a reply ('delay-reply').
 */
async function throughProxy (t: Test, env: NodeJS.ProcessEnv = {}, options: Parameters<typeof build>[2] = {}, trusting?: { keyPrefix: string }
): Promise<{ proxy: RedisProxy, api: Api, ops: string }> {
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  const store = trusting === undefined
    ? undefined
    : await connectRedisStore({ url: proxy.url, keyPrefix: trusting.keyPrefix, maxItemsPerContributor: 1000, logger: SILENT_LOGGER, heartbeat: TRUSTING_HEARTBEAT })
  return { proxy, ...await withSandboxes(t, 'redis', { REDIS_URL: proxy.url, ...env }, { ...options, ...(store === undefined ? {} : { store }) }) }
}

t.test('off unless SANDBOXES=on: the operations answer 404, and nothing is served under /sandboxes', async (t) => {
  const opsPort = await freePort()
  const ops = `http://127.0.0.1:${opsPort}`
  const api = await build(t, { STORE: 'memory', OPS_PORT: String(opsPort) })
  const created = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})
  t.same(created, { status: 404, json: { code: 'NOT_FOUND', message: 'Sandboxes are off on this instance (SANDBOXES=on turns them on).' } })
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', `/sandboxes/${randomUUID()}`)).status, 404)
  t.equal((await api.app.inject({ method: 'GET', url: `/sandboxes/${randomUUID()}/v1/items` })).statusCode, 404)
})

onEachStore('a sandbox is a catalogue of its own: its users, items, totals and keys, and nothing of it anywhere else', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store)
  const first = await create()
  const second = await create()
  t.match(first.base, /^\/sandboxes\/[0-9a-f-]{36}$/, 'served under its base')
  for (const url of [first.base, `${first.base}?page=1`]) {
    const root = await api.app.inject({ method: 'GET', url })
    t.equal(root.statusCode, (await api.call('openDocs')).statusCode, `${url.replace(/[0-9a-f-]{36}/, '{sandboxId}')} is its root`)
  }
  for (const url of ['/sandboxes/not-a-uuid/v1/items', `/sandboxes/${randomUUID()}x/v1/items`, `/sandboxes/${randomUUID()}/v1/items`]) {
    t.equal((await api.app.inject({ method: 'GET', url })).statusCode, 404, `no sandbox at ${url.replace(/[0-9a-f-]{36}/, '{uuid}')}`)
  }
  const own = await api.register()
  await api.createItem(own.accessToken)

  const alice = await first.register()
  const items = [await first.createItem(alice.accessToken), await first.createItem(alice.accessToken), await first.createItem(alice.accessToken)]
  const page = (await first.call('listItems', { token: alice.accessToken })).json()
  t.same([page.pagination.total, page.data.map((item: { id: string }) => item.id)], [3, items.map((item) => item.id)], 'the list shows its three items, total 3')
  t.equal((await api.call('listItems', { token: own.accessToken })).json().pagination.total, 1, 'the service\'s own list has none of them')
  const bob = await second.register()
  t.equal((await second.call('listItems', { token: bob.accessToken })).json().pagination.total, 0, 'another sandbox\'s list is empty')

  t.equal((await second.call('getItem', { token: bob.accessToken, params: { itemId: items[0]!.id } })).statusCode, 404, 'an id of one is unknown in another')
  t.equal((await api.call('getItem', { token: own.accessToken, params: { itemId: items[0]!.id } })).statusCode, 404, 'and in the service\'s own')
  for (const [where, client] of [['another sandbox', second], ['the service\'s own catalogue', api]] as const) {
    const response = await client.call('listItems', { token: alice.accessToken })
    t.same([response.statusCode, response.json().code], [401, 'INVALID_TOKEN'], `a sandbox's token is refused in ${where}`)
  }
  t.equal((await first.call('listItems', { token: own.accessToken })).statusCode, 401, 'and the service\'s in a sandbox')
  t.equal((await second.call('refreshTokens', { body: { refreshToken: alice.refreshToken } })).statusCode, 401, 'a refresh token too')
  t.equal((await second.call('loginUser', { body: { email: alice.user.email, password: 'correct horse battery staple' } })).statusCode, 401,
    'its users cannot sign in elsewhere')
  t.equal((await api.register({ email: alice.user.email })).user.email, alice.user.email, 'and their emails are free elsewhere')

  const keyed = { body: { name: 'keyed' }, headers: { 'idempotency-key': 'the-same-key' } }
  const inFirst = await first.call('createItem', { token: alice.accessToken, ...keyed })
  const inSecond = await second.call('createItem', { token: bob.accessToken, ...keyed })
  t.same([inFirst.statusCode, inSecond.statusCode, inSecond.headers['idempotent-replayed']], [201, 201, undefined], 'one key in two sandboxes is two keys')

  const id = first.base.split('/')[2]!
  const upperCased = new Api(api.app, `/sandboxes/${id.toUpperCase()}`)
  t.equal((await upperCased.call('listItems', { token: alice.accessToken })).json().pagination.total, 4, 'its id in capitals names it too')
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', `/sandboxes/${id.toUpperCase()}`)).status, 204, 'deleted')
  const gone = await api.app.inject({ method: 'GET', url: `${first.base}/v1/items`, headers: { authorization: `Bearer ${alice.accessToken}` } })
  t.same([gone.statusCode, gone.json().code], [404, 'NOT_FOUND'], 'its base answers 404 once it is gone')
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', `/sandboxes/${id}`)).status, 404, 'and deleting it again finds none')
  t.equal((await second.call('listItems', { token: bob.accessToken })).json().pagination.total, 1, 'the other sandbox is as it was')
})

onEachStore('GET /sandboxes lists the live sandboxes by id, a page at a time, with what each keeps; /metrics counts them', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store, { SANDBOX_LIMIT: '5' })
  const empty = await opsCall(t, ops, 'listSandboxes', 'GET', '/sandboxes')
  t.same(empty, { status: 200, json: { sandboxes: [], total: 0, limit: 5 } }, 'none at first')
  const before = Date.now()
  const made = await Promise.all([create(), create(), create()])
  const ids = made.map((sandbox) => sandbox.base.split('/')[2]!).sort()
  await made[1]!.createItem((await made[1]!.register()).accessToken)
  const first = await opsCall(t, ops, 'listSandboxes', 'GET', '/sandboxes?limit=2')
  const firstPage = first.json as { sandboxes: Array<{ id: string, createdAt: string, lastUsedAt: string, heldBytes: number, capacityBytes: number }>, total: number, limit: number, next: string }
  t.same([firstPage.sandboxes.map(({ id }) => id), firstPage.total, firstPage.limit, firstPage.next], [ids.slice(0, 2), 3, 5, ids[1]], 'a page of two, by id, says where the next begins')
  const second = await opsCall(t, ops, 'listSandboxes', 'GET', `/sandboxes?limit=2&after=${firstPage.next.toUpperCase()}`)
  const secondPage = second.json as typeof firstPage
  t.same([secondPage.sandboxes.map(({ id }) => id), secondPage.next], [ids.slice(2), undefined], 'the next page, the last')
  const listed = [...firstPage.sandboxes, ...secondPage.sandboxes]
  for (const sandbox of listed) {
    t.ok(Date.parse(sandbox.createdAt) >= before - 1000 && Date.parse(sandbox.lastUsedAt) >= Date.parse(sandbox.createdAt) - 1000, `${sandbox.id}: made and used since the test began`)
    t.equal(sandbox.capacityBytes, 10 * 128 * 1024, 'SANDBOX_ACCOUNTS times ACCOUNT_QUOTA_KIB')
  }
  const writtenIn = made[1]!.base.split('/')[2]!
  const held = new Map(listed.map(({ id, heldBytes }) => [id, heldBytes]))
  t.ok(held.get(writtenIn)! > 0 && listed.filter(({ id }) => id !== writtenIn).every(({ heldBytes }) => heldBytes === 0), 'what a sandbox keeps is its own: only the one with an item holds anything')
  const metrics = await (await fetch(`${ops}/metrics`)).text()
  t.match(metrics, /^items_service_sandboxes\{state="live"\} 3$/m, 'the live sandboxes are a gauge')
  t.match(metrics, /^items_service_sandboxes\{state="limit"\} 5$/m, 'beside their limit')
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', `/sandboxes/${ids[0]!}`)).status, 204)
  const after = (await opsCall(t, ops, 'listSandboxes', 'GET', '/sandboxes')).json as typeof firstPage
  t.same([after.sandboxes.map(({ id }) => id), after.total], [ids.slice(1), 2], 'a deleted one is no longer listed')
})

t.test('on Redis, a sandbox whose making time was not kept (made by an instance before it kept one) is listed without it', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  const { ops, create } = await withSandboxes(t, 'redis', { REDIS_KEY_PREFIX: keyPrefix })
  const id = (await create()).base.split('/')[2]!
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  t.equal(await redis.hdel(`${keyPrefix}sandbox-created`, id), 1, 'its making time forgotten')
  const { json } = await opsCall(t, ops, 'listSandboxes', 'GET', '/sandboxes')
  const [listed] = (json as { sandboxes: Array<Record<string, unknown>> }).sandboxes
  t.same([listed?.id, 'createdAt' in (listed ?? {}), typeof listed?.lastUsedAt], [id, false, 'string'])
})

onEachStore('a body of the operations API nested deeper than any of its requests can be is a 400, wherever the nesting is', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store)
  const sandbox = (await create()).base
  const deep = (levels: number): string => '{"a":'.repeat(levels) + '{}' + '}'.repeat(levels)
  const bodies = [
    ['createSandbox', 'POST', '/sandboxes', `{"users":[{"email":"d@example.com","password":"a good password","firstName":"D","lastName":"E","role":"contributor","extra":${deep(5000)}}]}`],
    ['createSandbox', 'POST', '/sandboxes', `{"users":[],"x":${deep(5000)}}`],
    ['createSandbox', 'POST', '/sandboxes', `{"items":[${'['.repeat(5000)}${']'.repeat(5000)}]}`],
    ['setSandboxWebhook', 'PUT', `${sandbox}/webhook`, `{"url":${deep(5000)}}`],
    ['advanceSandboxClock', 'POST', `${sandbox}/clock/advance`, deep(5000)],
    ['redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', deep(5000)]
  ] as const
  for (const [operationId, method, path, body] of bodies) {
    const { status, json } = await opsCall(t, ops, operationId, method, path, body, 'application/json; charset=utf-8')
    t.same([status, (json as { details?: unknown }).details], [400, [{ field: 'body', issue: 'is nested deeper than 16 levels' }]], `${operationId}: ${body.slice(0, 40)}`)
  }
  // Brackets in a string are text, and a quote escaped in it does not end it.
  const firstName = JSON.stringify(`"${'['.repeat(20)}"${'{'.repeat(20)}`)
  const fine = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', `{"users":[{"email":"d@example.com","password":"a good password","firstName":${firstName},"lastName":"E","role":"contributor"}]}`, 'application/json; charset=utf-8')
  t.equal(fine.status, 201, 'a body within the bound is parsed as before, whatever its strings hold')
})

t.test('on Redis, a sandbox keeps its fixtures with their passwords hashed, never in the clear, and a reset signs them in as before', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  const { api, ops } = await withSandboxes(t, 'redis', { REDIS_KEY_PREFIX: keyPrefix })
  const password = 'a fixture password nobody may read back'
  const user = { email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }
  const { id, basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', { users: [user] })).json as Sandbox
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const kept = await redis.hget(`${keyPrefix}sandbox-fixtures`, id) ?? ''
  t.notMatch(kept, password, 'the password is not kept')
  t.match(kept, '$argon2id$', 'its hash is')
  const signIn = async (): Promise<number> => (await new Api(api.app, basePath).call('loginUser', { body: { email: user.email, password } })).statusCode
  t.equal(await signIn(), 200)
  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200)
  t.equal(await signIn(), 200, 'signed in after a reset, from the hash kept')
  // Fixtures kept as they were sent, by an instance before this one, are prepared at the reset.
  await redis.hset(`${keyPrefix}sandbox-fixtures`, id, JSON.stringify({ users: [user] }))
  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200)
  t.equal(await signIn(), 200, 'and after a reset from fixtures kept as they were sent')
})

onEachStore('at most SANDBOX_LIMIT exist at once: one more is 507, until one is deleted', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store, { SANDBOX_LIMIT: '2' })
  const kept = await create()
  await create()
  t.same(await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {}),
    { status: 507, json: { code: 'STORE_FULL', message: 'All 2 sandboxes that SANDBOX_LIMIT allows exist; delete one (or wait for one to idle out after SANDBOX_IDLE_SECONDS), or raise SANDBOX_LIMIT.' } })
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', kept.base)).status, 204)
  t.ok(await create(), 'one deleted makes room for the next')
})

onEachStore('a sandbox admits SANDBOX_ACCOUNTS accounts, each within ACCOUNT_QUOTA_KIB: filled, it refuses while another and the service keep writing', async (t, store) => {
  const { api, create } = await withSandboxes(t, store, {
    SANDBOX_ACCOUNTS: '2',
    ACCOUNT_QUOTA_KIB: '64',
    // Two registrations an hour to the service.
    MAX_ACCOUNTS: '50',
    RATE_LIMIT: 'on',
    RATE_LIMIT_REGISTER: '1000',
    RATE_LIMIT_WRITES: '1000'
  })
  const full = await create()
  const other = await create()
  const filler = await full.register()
  let refused: { statusCode: number, code: string } | undefined
  for (let index = 0; refused === undefined && index < 1000; index += 1) {
    const response = await full.call('createItem', { token: filler.accessToken, body: { name: `item ${index}`, description: 'd'.repeat(4000) } })
    if (response.statusCode !== 201) refused = { statusCode: response.statusCode, code: response.json().code }
  }
  t.same(refused, { statusCode: 403, code: 'ACCOUNT_QUOTA_EXCEEDED' }, 'an account of the sandbox past its quota')
  const registered = await Promise.all(Array.from({ length: 3 }, async () => (await full.call('registerUser', { body: newUser() })).statusCode))
  t.same(registered.sort(), [201, 507, 507], 'its second account, and then no more: its own MAX_ACCOUNTS, in a burst the service-wide limit does not count')
  const writer = await other.register()
  t.ok(await other.createItem(writer.accessToken, { name: 'still written', description: 'd'.repeat(4000) }), 'another sandbox keeps writing')
  const own = await api.register()
  t.ok(await api.createItem(own.accessToken, { name: 'still written', description: 'd'.repeat(4000) }), 'and so does the service')
})

onEachStore('a sandbox\'s rate limits keep 256 keys each under the limit, and as many over it: callers come and go, and one over its limit stays refused', async (t, store) => {
  const keyPrefix = redisKeyPrefix(t)
  const { create } = await withSandboxes(t, store, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '2', REDIS_KEY_PREFIX: keyPrefix })
  const sandbox = await create()
  const register = async (remoteAddress: string): Promise<number> => (await sandbox.call('registerUser', { body: newUser(), remoteAddress })).statusCode
  const locked = '198.51.100.1'
  t.same([await register(locked), await register(locked), await register(locked)], [201, 201, 429], 'one address over its limit')
  // Three times as many callers as the limit keeps, each counted once (their registrations past the sandbox's
  // accounts are 507: the limit counts them on arrival all the same).
  for (let index = 0; index < 768; index += 1) await register(`2001:db8:${index.toString(16)}::1`)
  t.equal(await register(locked), 429, 'still refused: no newcomer pushed it out')
  t.not(await register('203.0.113.7'), 429, 'and a newcomer is counted afresh')
  if (store === 'redis') {
    const raw = new Redis(REDIS_URL)
    t.teardown(() => { raw.disconnect() })
    const counters = await raw.keys(`${keyPrefix}sandbox:${sandbox.base.split('/')[2]!}:*rate-limit:register:*`)
    t.ok(counters.length <= 2 * 256 && counters.length >= 256, `${counters.length} counters kept in Redis, within the bound`)
  }
})

t.test('on the memory store, a sandbox no request uses for SANDBOX_IDLE_SECONDS is deleted (on Redis, below)', async (t) => {
  const { lines, logStream } = captureLogs()
  const { api, create } = await withSandboxes(t, 'memory', { SANDBOX_IDLE_SECONDS: '1', LOG_LEVEL: 'info' }, { logStream })
  const idle = await create()
  t.equal((await idle.call('checkLiveness')).statusCode, 200, 'served while in use')
  await until('the idle sandbox deleted', () => lines.some((line) => line.includes('idle sandbox deleted')))
  t.equal((await api.app.inject({ method: 'GET', url: `${idle.base}/health/live` })).statusCode, 404, 'gone once idle past its lifetime')
})

onEachStore('a sandbox\'s events are read back in order, as its webhooks would carry them, its newest kept within their bound', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store)
  const sandbox = await create()
  const other = await create()
  const events = async (of: Api, query = ''): Promise<{ events: Array<{ sequence: number, event: { type: string, data: { item: { id: string, name: string }, actorId: string } } }>, next?: number }> => {
    const { status, json } = await opsCall(t, ops, 'listSandboxEvents', 'GET', `${of.base}/events${query}`)
    t.equal(status, 200)
    return json as Awaited<ReturnType<typeof events>>
  }
  const owner = await sandbox.register()
  const item = await sandbox.createItem(owner.accessToken, { name: 'first' })
  await sandbox.call('updateItem', { token: owner.accessToken, params: { itemId: item.id }, body: { name: 'renamed' } })
  await sandbox.call('deleteItem', { token: owner.accessToken, params: { itemId: item.id } })
  const own = await api.register()
  await api.createItem(own.accessToken)

  const listed = await events(sandbox)
  t.same(listed.events.map(({ sequence, event }) => [sequence, event.type, event.data.item.id, event.data.item.name, event.data.actorId]), [
    [1, 'items.item.added', item.id, 'first', owner.user.id],
    [2, 'items.item.edited', item.id, 'renamed', owner.user.id],
    [3, 'items.item.removed', item.id, 'renamed', owner.user.id]
  ], 'its three changes, in order, with their payloads')
  t.equal(listed.next, undefined, 'and no more')
  t.same((await events(other)).events, [], 'another sandbox has none of them, nor the service\'s')
  const paged = await events(sandbox, '?limit=2')
  t.same([paged.events.map(({ sequence }) => sequence), paged.next], [[1, 2], 2], 'a page says where the next begins')
  t.same((await events(sandbox, `?after=${paged.next!}`)).events.map(({ sequence }) => sequence), [3])

  const large = await sandbox.createItem(owner.accessToken, { name: 'large' })
  // Each of about 5 000 characters in 10 000 bytes: the bound is in bytes, whatever characters make them.
  for (let index = 0; index < 60; index += 1) {
    const edited = await sandbox.call('updateItem', { token: owner.accessToken, params: { itemId: large.id }, body: { description: `${index} `.padEnd(5_000, 'é') } })
    t.equal(edited.statusCode, 200)
  }
  const kept = (await events(sandbox, '?limit=1000')).events
  t.ok(kept.length < 64 && kept[0]!.sequence > 1, `its oldest events gave way to the newest within the bound (kept ${kept.length}, from ${kept[0]!.sequence})`)
  t.equal(kept.at(-1)!.sequence, 64, 'the newest is kept')
  const oldest = kept[0]!.sequence
  t.same((await events(sandbox, `?after=${oldest + 1}&limit=2`)).events.map(({ sequence }) => sequence), [oldest + 2, oldest + 3], 'a page after the oldest kept starts at its place')
  t.same((await events(sandbox, '?after=1&limit=1')).events.map(({ sequence }) => sequence), [oldest], 'and one after a place given way starts at the oldest kept')
  t.equal((await opsCall(t, ops, 'listSandboxEvents', 'GET', `/sandboxes/${randomUUID()}/events`)).status, 404, 'a sandbox that does not exist has none')
})

onEachStore('a sandbox made from fixtures (a SEED_FILE\'s shape) starts with them, and a reset puts it back to them', async (t, store) => {
  const { api, ops } = await withSandboxes(t, store, { SANDBOX_LIMIT: '1', SANDBOX_ACCOUNTS: '1' })
  const adaId = randomUUID()
  const itemId = randomUUID()
  const password = 'correct horse battery staple'
  const fixtures = {
    users: [{ id: adaId, email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }],
    items: [{ id: itemId, owner: 'ada@example.com', name: 'Difference engine' }]
  }
  const refused = async (body: unknown, expected: { status: number, field?: string }): Promise<void> => {
    const { status, json } = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', body)
    t.equal(status, expected.status, JSON.stringify(json))
    if (expected.field !== undefined) t.equal((json as { details: Array<{ field: string }> }).details[0]!.field, expected.field, 'naming the fixture at fault')
  }
  await refused({ users: [{ ...fixtures.users[0], email: 'not an email' }] }, { status: 400, field: 'users[0].email' })
  await refused({ cars: [] }, { status: 400, field: 'body' })
  const second = { ...fixtures.users[0], id: randomUUID(), email: 'grace@example.com' }
  // A sandbox of one account: the second is the fixture at fault, not the service's room.
  await refused({ users: [fixtures.users[0], second] }, { status: 400, field: 'users[1]' })

  const { status, json } = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', fixtures)
  t.equal(status, 201, 'a sandbox refused its fixtures is not kept: the one allowed is still free')
  const sandbox = new Api(api.app, (json as Sandbox).basePath)
  const signedIn = (await sandbox.call('loginUser', { body: { email: 'ada@example.com', password } })).json()
  t.equal(signedIn.user.id, adaId, 'its users sign in, with the ids given')
  t.same((await sandbox.call('listItems', { token: signedIn.accessToken })).json().data.map((item: { id: string }) => item.id), [itemId], 'and its items are there')
  await sandbox.createItem(signedIn.accessToken, { name: 'made in the test' })

  const reset = await opsCall(t, ops, 'resetSandbox', 'POST', `${sandbox.base}/reset`)
  t.same([reset.status, (reset.json as Sandbox).basePath], [200, sandbox.base], 'reset, under the same base')
  t.equal((await sandbox.call('listItems', { token: signedIn.accessToken })).statusCode, 401, 'its tokens are refused after a reset')
  const again = (await sandbox.call('loginUser', { body: { email: 'ada@example.com', password } })).json()
  t.same((await sandbox.call('listItems', { token: again.accessToken })).json().data.map((item: { id: string }) => item.id), [itemId], 'its fixtures alone are back')
  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `/sandboxes/${randomUUID()}/reset`)).status, 404, 'a sandbox that does not exist is not reset')
})

onEachStore('moves of one sandbox\'s clock sent at once are each made once: none lost, none made twice', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store)
  const sandbox = await create()
  const moves = await Promise.all(Array.from({ length: 8 }, async () => await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${sandbox.base}/clock/advance`, { seconds: 60 })))
  t.same(moves.map(({ status }) => status), Array(8).fill(200))
  t.same(moves.map(({ json }) => (json as { aheadSeconds: number }).aheadSeconds).sort((a, b) => a - b), [60, 120, 180, 240, 300, 360, 420, 480], 'each answers where it left the clock')
  const once = await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${sandbox.base}/clock/advance`, { seconds: 1 })
  t.equal((once.json as { aheadSeconds: number }).aheadSeconds, 481, 'and the clock holds all of them')
})

onEachStore('a sandbox\'s clock moves its receiver\'s retries: one due in an hour is made once the clock passes it', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store, { WEBHOOK_RETRY_DELAYS_MS: '3600000' })
  const sandbox = await create()
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  receiver.answer(500)
  const webhook = { url: receiver.url, secret: `whsec_${Buffer.alloc(32, 7).toString('base64')}` }
  t.equal((await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${sandbox.base}/webhook`, webhook)).status, 204)
  await sandbox.createItem((await sandbox.register()).accessToken)
  const retried = async (): Promise<boolean> =>
    /^items_service_webhook_deliveries_total\{subscriber="sandboxes",outcome="retried"\} 1$/m.test(await (await fetch(`${ops}/metrics`)).text())
  await until('its first attempt to fail, and its retry to be set an hour later', retried)
  t.equal((await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${sandbox.base}/clock/advance`, { seconds: 2 * 3600 })).status, 200)
  const [first, second] = await receiver.waitFor(2, HANG_MS)
  t.equal(second!.headers['webhook-id'], first!.headers['webhook-id'], 'the retry is made, on the sandbox\'s clock, not the service\'s')
})

onEachStore('a sandbox\'s clock moves on: everything the sandbox times follows it, and no other clock moves', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store, { RATE_LIMIT: 'on', RATE_LIMIT_WRITES: '2' })
  const sandbox = await create()
  const other = await create()
  const advance = async (of: Api, seconds: number): Promise<{ status: number, json: { now: string, aheadSeconds: number } }> =>
    await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${of.base}/clock/advance`, { seconds }) as { status: number, json: { now: string, aheadSeconds: number } }
  const hour = 3600
  const own = await api.register()
  const elsewhere = await other.register()
  const alice = await sandbox.register()
  const keyed = { token: alice.accessToken, body: { name: 'keyed' }, headers: { 'idempotency-key': 'create-once' } }
  const first = (await sandbox.call('createItem', keyed)).json()
  t.equal((await sandbox.call('createItem', keyed)).headers['idempotent-replayed'], 'true', 'a retry with the key is a replay')
  await sandbox.createItem(alice.accessToken, { name: 'second' })
  t.equal((await sandbox.call('createItem', { token: alice.accessToken, body: { name: 'over the limit' } })).statusCode, 429, 'the write limit is reached')

  const moved = await advance(sandbox, 901)
  t.equal(moved.status, 200)
  t.equal(moved.json.aheadSeconds, 901, 'the clock runs 901 s ahead')
  t.ok(Date.parse(moved.json.now) - Date.now() > 900_000, `its time is ahead of the service's (${moved.json.now})`)
  const expired = await sandbox.call('listItems', { token: alice.accessToken })
  t.same([expired.statusCode, expired.json().code], [401, 'TOKEN_EXPIRED'], 'its access token has expired')
  t.equal((await api.call('listItems', { token: own.accessToken })).statusCode, 200, 'the service\'s token has not')
  t.equal((await other.call('listItems', { token: elsewhere.accessToken })).statusCode, 200, 'nor another sandbox\'s')

  const refreshed = await sandbox.call('refreshTokens', { body: { refreshToken: alice.refreshToken } })
  t.equal(refreshed.statusCode, 200, 'the session lives on: a refresh gives a new pair')
  const { accessToken } = refreshed.json()
  const written = await sandbox.call('createItem', { token: accessToken, body: { name: 'a window later' } })
  t.equal(written.statusCode, 201, 'the write limit\'s window has turned')
  t.ok(Date.parse(written.json().createdAt) - Date.parse(first.createdAt) >= 901_000, `createdAt follows the clock (${first.createdAt}, then ${written.json().createdAt})`)
  const edited = await sandbox.call('updateItem', { token: accessToken, params: { itemId: first.id }, body: { name: 'edited' } })
  t.ok(Date.parse(edited.json().updatedAt) - Date.parse(first.updatedAt) >= 901_000, 'and updatedAt')
  const listed = await opsCall(t, ops, 'listSandboxEvents', 'GET', `${sandbox.base}/events`)
  const times = (listed.json as { events: Array<{ event: { time: string } }> }).events.map(({ event }) => Date.parse(event.time))
  t.ok(times.at(-1)! - times[0]! >= 901_000, 'and an event\'s time')

  await advance(sandbox, 6)
  const replayed = await sandbox.call('refreshTokens', { body: { refreshToken: alice.refreshToken } })
  t.equal(replayed.statusCode, 401, 'a replaced refresh token\'s leeway has lapsed: its replay is refused')
  t.equal((await sandbox.call('listItems', { token: accessToken })).statusCode, 401, 'and ends the session')

  const bob = await sandbox.register()
  const bobsKey = { token: bob.accessToken, body: { name: 'keyed' }, headers: { 'idempotency-key': 'create-once' } }
  const bobsFirst = (await sandbox.call('createItem', bobsKey)).json()
  await advance(sandbox, 24 * hour)
  const { accessToken: later, refreshToken: laterRefresh } = (await sandbox.call('refreshTokens', { body: { refreshToken: bob.refreshToken } })).json()
  const again = await sandbox.call('createItem', { ...bobsKey, token: later })
  t.same([again.statusCode, again.headers['idempotent-replayed'], again.json().id === bobsFirst.id], [201, undefined, false], 'an idempotency key lapses: the same key makes a new item')
  const kept = await sandbox.call('createItem', { ...bobsKey, token: later })
  t.same([kept.statusCode, kept.headers['idempotent-replayed'], kept.json().id], [201, 'true', again.json().id], 'and keeps it again')

  await advance(sandbox, 7 * 24 * hour)
  t.equal((await sandbox.call('refreshTokens', { body: { refreshToken: laterRefresh } })).statusCode, 401, 'a session reaches its lifetime')
  t.equal((await other.call('listItems', { token: elsewhere.accessToken })).statusCode, 200, 'another sandbox\'s session lives on')
  t.equal((await api.call('listItems', { token: own.accessToken })).statusCode, 200, 'and the service\'s')

  const tooFar = await advance(sandbox, 3_155_760_000)
  t.same([tooFar.status, (tooFar.json as unknown as { details: Array<{ field: string }> }).details[0]!.field], [400, 'body.seconds'], 'no further than 100 years ahead')
  t.equal((await advance(sandbox, 0)).status, 400, 'and always forward')
  t.equal((await opsCall(t, ops, 'advanceSandboxClock', 'POST', `/sandboxes/${randomUUID()}/clock/advance`, { seconds: 1 })).status, 404, 'a sandbox that does not exist has no clock')

  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${sandbox.base}/reset`)).status, 200)
  const afterReset = await sandbox.register()
  const made = await sandbox.createItem(afterReset.accessToken)
  t.ok(Math.abs(Date.parse(made.createdAt) - Date.now()) < 60_000, 'a reset sets the clock to the service\'s again')
})

onEachStore('a sandbox\'s events are delivered, signed, to the receiver its test names, and none other\'s; a reset keeps it, a removal or a deletion ends it', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store, { WEBHOOK_RETRY_DELAYS_MS: '20,20' })
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  const receivers = await Promise.all([startReceiver(), startReceiver(), startReceiver()])
  for (const receiver of receivers) t.teardown(receiver.stop)
  const [first, second, replacement] = receivers as [Receiver, Receiver, Receiver]
  const setWebhook = async (of: Api, body: unknown): Promise<number> => (await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${of.base}/webhook`, body)).status
  // What a receiver was sent, each delivery's signature checked with the sandbox's secret: [type, the item's name].
  const delivered = async (receiver: Receiver, count: number): Promise<Array<[string, string]>> => (await receiver.waitFor(count, HANG_MS)).map((received) => {
    const event = new Webhook(secret).verify(received.body, Object.fromEntries(Object.entries(received.headers).map(([name, value]) => [name, String(value)]))) as { type: string, data: { item: { name: string } } }
    return [event.type, event.data.item.name]
  })

  const sandbox = await create()
  const other = await create()
  const early = await sandbox.register()
  await sandbox.createItem(early.accessToken, { name: 'before any receiver' })
  t.equal(await setWebhook(sandbox, { url: first.url, secret }), 204)
  t.equal(await setWebhook(other, { url: second.url, secret }), 204)
  const own = await api.register()
  await api.createItem(own.accessToken, { name: 'the service\'s own' })
  await other.createItem((await other.register()).accessToken, { name: 'the other sandbox\'s' })
  first.answer(500)
  await sandbox.createItem(early.accessToken, { name: 'delivered' })
  const attempts = await delivered(first, 2)
  t.same(attempts, [['items.item.added', 'delivered'], ['items.item.added', 'delivered']], 'its event alone, signed with its secret: a 500, then the retry')
  t.equal(first.received[0]!.headers['webhook-id'], first.received[1]!.headers['webhook-id'], 'the retry is the same delivery')
  t.same(await delivered(second, 1), [['items.item.added', 'the other sandbox\'s']], 'another sandbox\'s receiver gets its own sandbox\'s event alone')

  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${sandbox.base}/reset`)).status, 200)
  const afterReset = await sandbox.register()
  await sandbox.createItem(afterReset.accessToken, { name: 'after the reset' })
  t.same((await delivered(first, 3)).at(-1), ['items.item.added', 'after the reset'], 'a reset keeps the receiver')

  t.equal(await setWebhook(sandbox, { url: replacement.url, secret }), 204, 'a receiver named again replaces the one before')
  await sandbox.createItem(afterReset.accessToken, { name: 'to the replacement' })
  t.same(await delivered(replacement, 1), [['items.item.added', 'to the replacement']])
  t.equal((await opsCall(t, ops, 'deleteSandboxWebhook', 'DELETE', `${sandbox.base}/webhook`)).status, 204, 'removed')
  t.equal((await opsCall(t, ops, 'deleteSandboxWebhook', 'DELETE', `${sandbox.base}/webhook`)).status, 204, 'and removed again: it had none')
  await sandbox.createItem(afterReset.accessToken, { name: 'listed, not delivered' })
  t.equal(await setWebhook(sandbox, { url: replacement.url, secret }), 204)
  await sandbox.createItem(afterReset.accessToken, { name: 'delivered again' })
  t.same((await delivered(replacement, 2)).at(-1), ['items.item.added', 'delivered again'], 'what it recorded without a receiver is not delivered later')
  t.equal(replacement.received.length, 2)
  t.equal(first.received.length, 3, 'nor to the receiver it replaced')
  const names = (await opsCall(t, ops, 'listSandboxEvents', 'GET', `${sandbox.base}/events`)).json as { events: Array<{ event: { data: { item: { name: string } } } }> }
  t.same(names.events.map(({ event }) => event.data.item.name), ['after the reset', 'to the replacement', 'listed, not delivered', 'delivered again'], 'every event is listed')

  for (const [body, field] of [[{ url: 'ftp://127.0.0.1/hook', secret }, 'body.url'], [{ url: 'http://user:password@127.0.0.1/hook', secret }, 'body.url'], [{ url: first.url, secret: 'whsec_c2hvcnQ=' }, 'body.secret'], [{ url: first.url }, 'body.secret'], [{ url: first.url, secret, channels: [] }, 'body.channels']] as const) {
    const refused = await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${sandbox.base}/webhook`, body)
    t.same([refused.status, (refused.json as { details: Array<{ field: string }> }).details.map((detail) => detail.field)], [400, [field]], `refused: ${JSON.stringify(body)}`)
  }
  for (const [operationId, method] of [['setSandboxWebhook', 'PUT'], ['deleteSandboxWebhook', 'DELETE']] as const) {
    t.equal((await opsCall(t, ops, operationId, method, `/sandboxes/${randomUUID()}/webhook`, method === 'PUT' ? { url: first.url, secret } : undefined)).status, 404, `${operationId}: a sandbox that does not exist has no receiver`)
  }

  replacement.answer('hang')
  await sandbox.createItem(afterReset.accessToken, { name: 'in progress at the deletion' })
  await replacement.waitFor(3, HANG_MS)
  t.equal(replacement.hanging(), 1, 'an attempt is open')
  t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', sandbox.base)).status, 204, 'a sandbox deleted while its receiver holds an attempt open')
  await until('the attempt in progress to end with its sandbox', () => replacement.hanging() === 0)
  t.equal((await opsCall(t, ops, 'listSandboxEvents', 'GET', `${sandbox.base}/events`)).status, 404)
})

onEachStore('an app that closes while a sandbox\'s receiver holds an attempt open ends the attempt', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store)
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  receiver.answer('hang')
  const sandbox = await create()
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  t.equal((await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${sandbox.base}/webhook`, { url: receiver.url, secret })).status, 204)
  await sandbox.createItem((await sandbox.register()).accessToken)
  await receiver.waitFor(1, HANG_MS)
  t.equal(receiver.hanging(), 1, 'the attempt is open')
  await api.app.close()
  await until('the attempt to end with the app', () => receiver.hanging() === 0)
})

t.test('on Redis, every instance serves every sandbox: made on one, used, moved on, reset and deleted on another, within one limit', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  const instance = async (): Promise<{ api: Api, ops: string }> => {
    const opsPort = await freePort()
    const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: keyPrefix, SANDBOXES: 'on', SANDBOX_LIMIT: '2', OPS_PORT: String(opsPort) })
    return { api, ops: `http://127.0.0.1:${opsPort}` }
  }
  const [a, b] = [await instance(), await instance()]
  const made = await opsCall(t, a.ops, 'createSandbox', 'POST', '/sandboxes', {})
  const { basePath } = made.json as Sandbox
  const [onA, onB] = [new Api(a.api.app, basePath), new Api(b.api.app, basePath)]
  const alice = await onB.register()
  const item = await onA.createItem(alice.accessToken, { name: 'made on A' })
  t.same((await onB.call('listItems', { token: alice.accessToken })).json().data.map(({ id }: { id: string }) => id), [item.id], 'made on A, listed on B')
  const listed = await opsCall(t, b.ops, 'listSandboxEvents', 'GET', `${basePath}/events`)
  t.same((listed.json as { events: Array<{ sequence: number, event: { subject: string } }> }).events.map(({ sequence, event }) => [sequence, event.subject]), [[1, item.id]],
    'its event listed on B')
  t.equal((await a.api.call('listItems', { token: alice.accessToken })).statusCode, 401, 'and nothing of it in the service\'s own catalogue')

  t.equal((await opsCall(t, b.ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: alice.expiresIn + 1 })).status, 200, 'its clock moved on on B')
  const expired = await onA.call('listItems', { token: alice.accessToken })
  t.same([expired.statusCode, expired.json().code], [401, 'TOKEN_EXPIRED'], 'and its access token expired on A')

  t.equal((await opsCall(t, a.ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200, 'reset on A')
  const refreshed = await onB.call('refreshTokens', { body: { refreshToken: alice.refreshToken } })
  t.equal(refreshed.statusCode, 401, 'its sessions are gone on B')
  const bob = await onB.register()
  t.equal((await onA.call('listItems', { token: bob.accessToken })).json().pagination.total, 0, 'and its items')
  const made2 = await onA.createItem(bob.accessToken)
  t.ok(Math.abs(Date.parse(made2.createdAt) - Date.now()) < 60_000, 'its clock is the service\'s again')

  t.equal((await opsCall(t, a.ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: 3_155_760_000 })).status, 200, 'its clock moved 100 years on')
  const tooFar = await opsCall(t, a.ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: 1 })
  t.same([tooFar.status, (tooFar.json as { details: Array<{ field: string }> }).details[0]!.field], [400, 'body.seconds'], 'and no further')
  const unknown = `/sandboxes/${randomUUID()}`
  t.same([
    (await opsCall(t, a.ops, 'resetSandbox', 'POST', `${unknown}/reset`)).status,
    (await opsCall(t, a.ops, 'advanceSandboxClock', 'POST', `${unknown}/clock/advance`, { seconds: 1 })).status,
    (await opsCall(t, a.ops, 'listSandboxEvents', 'GET', `${unknown}/events`)).status,
    (await opsCall(t, a.ops, 'deleteSandboxWebhook', 'DELETE', `${unknown}/webhook`)).status,
    (await opsCall(t, a.ops, 'deleteSandbox', 'DELETE', unknown)).status
  ], [404, 404, 404, 404, 404], 'a sandbox that does not exist is none of them')

  t.equal((await opsCall(t, b.ops, 'createSandbox', 'POST', '/sandboxes', {})).status, 201, 'a second made on B')
  t.equal((await opsCall(t, a.ops, 'createSandbox', 'POST', '/sandboxes', {})).status, 507, 'and a third on A is past the limit they share')
  t.equal((await opsCall(t, b.ops, 'deleteSandbox', 'DELETE', basePath)).status, 204, 'deleted on B')
  t.equal((await a.api.app.inject({ method: 'GET', url: `${basePath}/v1/items` })).statusCode, 404, 'gone on A')
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const left: string[] = []
  for await (const keys of redis.scanStream({ match: `${keyPrefix}sandbox:${basePath.split('/')[2]!}:*`, count: 1000 }) as AsyncIterable<string[]>) left.push(...keys)
  t.same(left, [], 'with every key it kept')
})

onEachStore('a receiver that falls behind: what its sandbox cannot keep for it is counted dropped and logged, and every other event is delivered', async (t, store) => {
  const { lines, logStream } = captureLogs()
  const { ops, create } = await withSandboxes(t, store, { RATE_LIMIT: 'off', ACCOUNT_QUOTA_KIB: '1024', WEBHOOK_RETRY_DELAYS_MS: '20,20', LOG_LEVEL: 'warn' }, { logStream })
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  // As many attempts held open as a receiver is sent at once: nothing more is taken until they end.
  receiver.answer(...Array<'hang'>(32).fill('hang'))
  const sandbox = await create()
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  t.equal((await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${sandbox.base}/webhook`, { url: receiver.url, secret })).status, 204)
  const tokens = await Promise.all([1, 2, 3, 4].map(async () => (await sandbox.register()).accessToken))
  // Twice as many bytes of events as the sandbox keeps for its receiver, from as many accounts as hold them.
  const created = 120
  for (let index = 0; index < created; index++) await sandbox.createItem(tokens[index % tokens.length]!, { name: `item ${index}`, description: 'd'.repeat(10_000) })
  // Every one held, whatever order they came in: none of them would be left to wait out its timeout.
  await until('the receiver to hold every attempt it is sent at once', () => receiver.hanging() === 32)
  receiver.release(503)
  const dropped = (): number => lines.filter((line) => line.includes('webhook deliveries dropped')).reduce((sum, line) => sum + (JSON.parse(line) as { dropped: number }).dropped, 0)
  const delivered = (): number => new Set(receiver.received.map(({ headers }) => headers['webhook-id'])).size
  await until('every event delivered or counted dropped', () => delivered() + dropped() >= created)
  t.ok(dropped() > 0, `${dropped()} dropped`)
  t.equal(delivered() + dropped(), created, `${delivered()} delivered: each event either`)
})

t.test('on Redis, a sandbox\'s receiver set on one instance is sent what every instance records, once; replaced, reset or removed on another, as that one says', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  const instance = async (): Promise<{ api: Api, ops: string }> => {
    const opsPort = await freePort()
    const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: keyPrefix, SANDBOXES: 'on', OPS_PORT: String(opsPort) })
    return { api, ops: `http://127.0.0.1:${opsPort}` }
  }
  const [a, b] = [await instance(), await instance()]
  const receivers = await Promise.all([startReceiver(), startReceiver(), startReceiver()])
  for (const receiver of receivers) t.teardown(receiver.stop)
  const [first, replacement, last] = receivers as [Receiver, Receiver, Receiver]
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  const { basePath } = (await opsCall(t, a.ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  const [onA, onB] = [new Api(a.api.app, basePath), new Api(b.api.app, basePath)]
  const names = async (receiver: Receiver, count: number): Promise<string[]> =>
    (await receiver.waitFor(count, HANG_MS)).map(({ body }) => (JSON.parse(body) as { data: { item: { name: string } } }).data.item.name)
  const { accessToken } = await onA.register()

  t.equal((await opsCall(t, a.ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: first.url, secret })).status, 204, 'set on A')
  for (const [on, name] of [[onB, 'on B'], [onA, 'on A'], [onB, 'on B again']] as const) await on.createItem(accessToken, { name })
  t.same((await names(first, 3)).sort(), ['on A', 'on B', 'on B again'], 'what either records')

  t.equal((await opsCall(t, b.ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: replacement.url, secret })).status, 204, 'replaced on B')
  await onA.createItem(accessToken, { name: 'to the replacement' })
  t.same(await names(replacement, 1), ['to the replacement'], 'A\'s event goes to the replacement')
  t.equal((await opsCall(t, a.ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200, 'reset on A')
  const afterReset = await onB.register()
  await onB.createItem(afterReset.accessToken, { name: 'after the reset' })
  t.same((await names(replacement, 2)).at(-1), 'after the reset', 'the receiver is kept')

  t.equal((await opsCall(t, a.ops, 'deleteSandboxWebhook', 'DELETE', `${basePath}/webhook`)).status, 204, 'removed on A')
  await onB.createItem(afterReset.accessToken, { name: 'listed, not delivered' })
  t.equal((await opsCall(t, b.ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: last.url, secret })).status, 204, 'a receiver set again on B')
  await onA.createItem(afterReset.accessToken, { name: 'to the last' })
  t.same(await names(last, 1), ['to the last'], 'gets what is recorded from then on')
  t.same([first.received.length, replacement.received.length, last.received.length], [3, 2, 1], 'and none was sent to another, or twice')

  t.equal((await opsCall(t, b.ops, 'deleteSandbox', 'DELETE', basePath)).status, 204)
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const left: string[] = []
  for await (const keys of redis.scanStream({ match: `${keyPrefix}sandbox:*`, count: 1000 }) as AsyncIterable<string[]>) left.push(...keys)
  t.same([left, await redis.hlen(`${keyPrefix}sandbox-receivers`)], [[], 0], 'its receiver forgotten with every key it kept')
})

t.test('on Redis, an instance that cannot read the sandboxes\' receivers says so once, and follows another instance\'s once it reads them again: set, it delivers; removed, its attempt ends', { skip: redisSkipped }, async (t) => {
  const redis = await ownRedis(t)
  const keyPrefix = redisKeyPrefix(t)
  const { lines, logStream } = captureLogs()
  const instance = async (): Promise<{ api: Api, ops: string }> => {
    const opsPort = await freePort()
    // No attempt ends by its time: one that ends was ended.
    const env = { STORE: 'redis', REDIS_URL: redis.url, REDIS_KEY_PREFIX: keyPrefix, SANDBOXES: 'on', OPS_PORT: String(opsPort), LOG_LEVEL: 'warn', WEBHOOK_TIMEOUT_MS: '600000', WEBHOOK_RECLAIM_AFTER_MS: '700000' }
    const api = await build(t, env, { logStream })
    return { api, ops: `http://127.0.0.1:${opsPort}` }
  }
  const [a, b] = [await instance(), await instance()]
  const { basePath } = (await opsCall(t, a.ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  const unread = (): number => lines.filter((line) => line.includes('cannot read the sandboxes\' receivers')).length
  redis.signal('SIGSTOP')
  await until('the failed reads logged', () => unread() === 2)
  await sleep(2 * 1000)
  t.equal(unread(), 2, 'once by each instance, however long it lasts')
  redis.signal('SIGCONT')
  await until('both ready again', async () => (await a.api.call('checkReadiness')).statusCode === 200 && (await b.api.call('checkReadiness')).statusCode === 200)
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  t.equal((await opsCall(t, b.ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: receiver.url, secret })).status, 204, 'set on B')
  await b.api.app.close()
  const onA = new Api(a.api.app, basePath)
  await onA.createItem((await onA.register()).accessToken, { name: 'delivered by A' })
  t.same((await receiver.waitFor(1, HANG_MS)).map(({ body }) => (JSON.parse(body) as { data: { item: { name: string } } }).data.item.name), ['delivered by A'],
    'B closed, A delivers what B set')

  // Another sandbox's receiver, set on C: A reads it beside the one it delivers already, which it keeps delivering.
  const c = await instance()
  const other = (await opsCall(t, c.ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  const otherReceiver = await startReceiver()
  t.teardown(otherReceiver.stop)
  t.equal((await opsCall(t, c.ops, 'setSandboxWebhook', 'PUT', `${other.basePath}/webhook`, { url: otherReceiver.url, secret })).status, 204, 'another set on C')
  await c.api.app.close()
  const otherOnA = new Api(a.api.app, other.basePath)
  await otherOnA.createItem((await otherOnA.register()).accessToken, { name: 'the other\'s' })
  await otherReceiver.waitFor(1, HANG_MS)
  receiver.answer('hang')
  const { accessToken } = await onA.register()
  await onA.createItem(accessToken, { name: 'held open' })
  await receiver.waitFor(2, HANG_MS)
  t.equal(receiver.hanging(), 1, 'an attempt of A\'s is open, the first receiver still delivered')
  const d = await instance()
  t.equal((await opsCall(t, d.ops, 'deleteSandboxWebhook', 'DELETE', `${basePath}/webhook`)).status, 204, 'removed on D')
  await until('A to end its attempt', () => receiver.hanging() === 0)
})

interface SandboxChange {
  script: Marked
  /** Its answer when it was made and its reply came; and a retry's once it was made. */
  status: number
  retried: number
  /** Whether a retry of it, once made, makes it again. */
  repeats: boolean
  /** What the sandbox at `basePath` needs first. */
  prepare?: (t: Test, ops: string, basePath: string) => Promise<void>
  /** Sends it to the sandbox at `basePath`, through the operations API at `ops`. */
  send: (t: Test, ops: string, basePath: string) => Promise<{ status: number }>
  /** How many times it is made, read from Redis. */
  count: (raw: Redis, keys: RedisKeys, id: string) => Promise<number>
}

const RECEIVER_SECRET = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
const registryEntry = async (raw: Redis, keys: RedisKeys, id: string): Promise<string | null> => await raw.hget(keys.sandboxes, id)
const SANDBOX_CHANGES: Readonly<Record<string, SandboxChange>> = {
  createSandbox: {
    script: sandboxScripts.createSandbox,
    status: 201,
    // Each create makes a sandbox of its own: a retry makes another, as it would without any fault.
    retried: 201,
    repeats: true,
    send: async (t, ops) => await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {}),
    count: async (raw, keys) => await raw.hlen(keys.sandboxes) - 1
  },
  resetSandbox: {
    // Read, then committed while what was read holds.
    script: ANY_COMMIT,
    status: 200,
    retried: 200,
    repeats: true,
    send: async (t, ops, basePath) => await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`),
    count: async (raw, keys, id) => Number((await registryEntry(raw, keys, id))?.split(' ')[0]) - 1
  },
  deleteSandbox: {
    // Read, then committed while what was read holds.
    script: ANY_COMMIT,
    status: 204,
    // Gone: a client that sends the deletion again after a lost answer takes 404 as done.
    retried: 404,
    repeats: false,
    send: async (t, ops, basePath) => await opsCall(t, ops, 'deleteSandbox', 'DELETE', basePath),
    count: async (raw, keys, id) => await registryEntry(raw, keys, id) === null ? 1 : 0
  },
  setSandboxWebhook: {
    script: sandboxScripts.setSandboxReceiver,
    status: 204,
    retried: 204,
    // The same receiver set again.
    repeats: false,
    send: async (t, ops, basePath) => await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: 'http://127.0.0.1:9/hook', secret: RECEIVER_SECRET }),
    count: async (raw, keys, id) => await raw.hexists(keys.sandboxReceivers, id)
  },
  deleteSandboxWebhook: {
    script: sandboxScripts.setSandboxReceiver,
    status: 204,
    retried: 204,
    repeats: false,
    prepare: async (t, ops, basePath) => { await SANDBOX_CHANGES.setSandboxWebhook!.send(t, ops, basePath) },
    send: async (t, ops, basePath) => await opsCall(t, ops, 'deleteSandboxWebhook', 'DELETE', `${basePath}/webhook`),
    count: async (raw, keys, id) => 1 - await raw.hexists(keys.sandboxReceivers, id)
  },
  advanceSandboxClock: {
    // Read, then committed while what was read holds.
    script: ANY_COMMIT,
    status: 200,
    // A move is not idempotent: one sent again moves the clock again, as the contract says of its 504.
    retried: 200,
    repeats: true,
    send: async (t, ops, basePath) => await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: 60 }),
    count: async (raw, keys, id) => Number((await registryEntry(raw, keys, id))?.split(' ')[1]) / 60_000
  }
}

t.test('on Redis, a change of a sandbox whose entry another instance changed after it was read is decided again on the entry as it is then', { skip: redisSkipped }, async (t) => {
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const keyPrefix = redisKeyPrefix(t)
  const keys = redisKeys(keyPrefix)
  const { proxy, ops } = await throughProxy(t, { REDIS_KEY_PREFIX: keyPrefix })
  const { basePath, id } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  // Another instance moves the clock a minute on while this one's move of a minute is on its way.
  proxy.before(ANY_COMMIT, async () => await raw.hset(keys.sandboxes, id, '1 60000'))
  const moved = await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: 60 })
  t.same([moved.status, (moved.json as { aheadSeconds: number }).aheadSeconds], [200, 120], 'both moves are kept')
  t.equal(await registryEntry(raw, keys, id), '1 120000')
})

t.test('on Redis, a reset that was made but whose new catalogue could not be prepared is answered as unknown (504), never as not done', { skip: redisSkipped }, async (t) => {
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const keyPrefix = redisKeyPrefix(t)
  const keys = redisKeys(keyPrefix)
  const { proxy, api, ops } = await throughProxy(t, { REDIS_KEY_PREFIX: keyPrefix })
  const { basePath, id } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  // The first command that prepares the reset's new catalogue: whether its items are indexed.
  proxy.arm('items-indexed', 'drop-connection')
  const reset = await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)
  t.equal(reset.status, 504, 'the reset is not answered as undone')
  t.same(proxy.injected, ['drop-connection'])
  t.equal(await SANDBOX_CHANGES.resetSandbox!.count(raw, keys, id), 1, 'for it was made')
  await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200, 'a reset sent again prepares its catalogue')
})

t.test('on Redis, every change of a sandbox through every fault: answered as what was done, and made once', { skip: redisSkipped }, async (t) => {
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  for (const [name, change] of Object.entries(SANDBOX_CHANGES)) {
    for (const fault of REDIS_FAULTS) {
      await t.test(`${name}, ${fault}: ${FAULT_OUTCOMES[fault]}`, async (t) => {
        const keyPrefix = redisKeyPrefix(t)
        const keys = redisKeys(keyPrefix)
        const { proxy, api, ops } = await throughProxy(t, {}, {}, { keyPrefix })
        const { basePath, id } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
        await change.prepare?.(t, ops, basePath)
        proxy.arm(change.script, fault)
        const outcome = FAULT_OUTCOMES[fault]
        const answered = await change.send(t, ops, basePath)
        t.equal(answered.status, answerTo(outcome, change.status), 'answered as what was done')
        t.same(proxy.injected, [fault])
        if (outcome === 'unknown') proxy.up()
        await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
        t.equal(await change.count(raw, keys, id), outcome === 'not made' ? 0 : 1, outcome === 'not made' ? 'not made' : 'made once')
        t.equal((await change.send(t, ops, basePath)).status, outcome === 'not made' ? change.status : change.retried, 'the retry')
        t.equal(await change.count(raw, keys, id), outcome !== 'not made' && change.repeats ? 2 : 1, 'and after the retry')
      })
    }
  }
})

t.test('on Redis, a receiver set whose receiver before cannot be forgotten is answered as set, and only the new one is delivered', { skip: redisSkipped }, async (t) => {
  const { lines, logStream } = captureLogs()
  const { proxy, api, ops } = await throughProxy(t, { LOG_LEVEL: 'warn' }, { logStream })
  const { basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  const [before, after] = [await startReceiver(), await startReceiver()]
  t.teardown(before.stop)
  t.teardown(after.stop)
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  t.equal((await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: before.url, secret })).status, 204)
  // Forgetting the receiver before deletes its subscriber's keys.
  proxy.arm('unlink', 'drop-connection')
  t.equal((await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: after.url, secret })).status, 204, 'set: the registry has it')
  t.same(proxy.injected, ['drop-connection'], 'what followed it failed')
  t.ok(lines.some((line) => line.includes('a sandbox\'s change is made, but not what follows it here')), 'and logged')
  await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
  const sandbox = new Api(api.app, basePath)
  await sandbox.createItem((await sandbox.register()).accessToken, { name: 'delivered all the same' })
  t.same((await after.waitFor(1, HANG_MS)).map(({ body }) => (JSON.parse(body) as { data: { item: { name: string } } }).data.item.name), ['delivered all the same'])
  t.same(before.received, [], 'the receiver before is sent nothing')
})

t.test('on Redis, a reset whose seeding meets a fault answers 503 and keeps the sandbox, so that the reset tried again puts its fixtures back', { skip: redisSkipped }, async (t) => {
  const { proxy, api, ops } = await throughProxy(t)
  const password = 'correct horse battery staple'
  const fixtures = { users: [{ email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }] }
  const { basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', fixtures)).json as Sandbox
  proxy.arm(ANY_COMMIT, 'drop-connection')
  const failed = await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)
  t.same([failed.status, proxy.injected], [503, ['drop-connection']], 'the reset is not done, and says so')
  await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
  t.equal((await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`)).status, 200, 'tried again, the sandbox is there to reset')
  t.equal((await new Api(api.app, basePath).call('loginUser', { body: { email: 'ada@example.com', password } })).statusCode, 200, 'with its fixtures')
})

t.test('on Redis, a sandbox whose making or seeding fails after it is counted is not kept: the create tried again takes its place under SANDBOX_LIMIT', { skip: redisSkipped }, async (t) => {
  const { lines, logStream } = captureLogs()
  const { proxy, api, ops } = await throughProxy(t, { SANDBOX_LIMIT: '1', LOG_LEVEL: 'warn' }, { logStream })
  const fixtures = { users: [{ email: 'ada@example.com', password: 'correct horse battery staple', firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }] }
  // Its catalogue prepared once the registry counts it; then its first fixture.
  for (const [fault, body] of [['items-indexed', {}], [ANY_COMMIT, fixtures]] as const) {
    proxy.arm(fault, 'drop-connection')
    t.equal((await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', body)).status, 503, 'not made')
    await until('ready again', async () => (await api.call('checkReadiness')).statusCode === 200)
    const made = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', body)
    t.equal(made.status, 201, 'the one allowed is free')
    t.equal((await opsCall(t, ops, 'deleteSandbox', 'DELETE', (made.json as Sandbox).basePath)).status, 204)
  }
  t.same(proxy.injected, ['drop-connection', 'drop-connection'])
  // A command's connection cut fails at once, the deletion after it too: the next create deletes it. A write's is
  // answered once Redis has told the write's outcome, when the deletion is made at once or, the instance not yet
  // sure of its connection, by the next create.
  t.ok(lines.filter((line) => line.includes('a sandbox whose making failed is not deleted yet')).length >= 1, 'the first deleted by the next create')
})

t.test('on Redis, a write in flight when its sandbox is deleted or reset changes nothing: no key of the generation that ended is left', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  // A meets Redis through the proxy, which holds its write; B, which deletes and resets, does not.
  const { proxy, api, ops } = await throughProxy(t, { REDIS_KEY_PREFIX: keyPrefix })
  const { ops: opsOfB } = await withSandboxes(t, 'redis', { REDIS_KEY_PREFIX: keyPrefix })
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  for (const [ending, method, suffix] of [['deleteSandbox', 'DELETE', ''], ['resetSandbox', 'POST', '/reset']] as const) {
    const { basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
    const sandbox = new Api(api.app, basePath)
    await sandbox.register()
    const id = basePath.split('/')[2]!
    const [generation] = String(await raw.hget(`${keyPrefix}sandboxes`, id)).split(' ')
    const keysOfGeneration = async (): Promise<string[]> => await raw.keys(`${keyPrefix}sandbox:${id}:${generation!}:*`)
    t.ok((await keysOfGeneration()).length > 0, `${ending}: the generation keeps its keys`)
    // A registration, which guards on nothing the generation held: between its checks and its commit, the other
    // instance ends the generation.
    proxy.before(ANY_COMMIT, async () => { t.equal((await opsCall(t, opsOfB, ending, method, `${basePath}${suffix}`)).status, ending === 'deleteSandbox' ? 204 : 200) })
    const registered = await sandbox.call('registerUser', { body: newUser() })
    t.same([registered.statusCode, registered.json().code], [503, 'SERVICE_UNAVAILABLE'], `${ending}: the write in flight is not made, and says so`)
    t.same(await keysOfGeneration(), [], `${ending}: no key of the generation that ended is left`)
  }
})

t.test('on Redis, a receiver set or kept by a reset, but followed late, is sent every event recorded after the set or the reset', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  // A, which sets and resets, meets Redis through the proxy; B does not.
  const { proxy, ops } = await throughProxy(t, { REDIS_KEY_PREFIX: keyPrefix })
  const { api: b } = await withSandboxes(t, 'redis', { REDIS_KEY_PREFIX: keyPrefix })
  const { basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  const secret = `whsec_${Buffer.from('a sandbox receiver\'s secret, 24 bytes or more').toString('base64')}`
  const onB = new Api(b.app, basePath)
  // Its first registration starts the hashing process: not in the moments below.
  let { accessToken } = await onB.register()
  await onB.createItem(accessToken, { name: 'before the set' })
  const changes = [
    { name: 'right after the set', change: async () => await opsCall(t, ops, 'setSandboxWebhook', 'PUT', `${basePath}/webhook`, { url: receiver.url, secret }) },
    { name: 'right after the reset', change: async () => await opsCall(t, ops, 'resetSandbox', 'POST', `${basePath}/reset`) }
  ]
  for (const [index, { name, change }] of changes.entries()) {
    t.ok([200, 204].includes((await change()).status), name.replace('right after ', ''))
    // A, which follows its own change at once, cannot deliver.
    proxy.partition(['main'])
    // Recorded on B before any instance follows the receiver (each reads the receivers every second), unless B
    // happens to read them first.
    if (index === 1) accessToken = (await onB.register()).accessToken
    await onB.createItem(accessToken, { name })
    proxy.resume()
    t.same((await receiver.waitFor(index + 1, HANG_MS)).map(({ body }) => (JSON.parse(body) as { data: { item: { name: string } } }).data.item.name).at(-1), name)
  }
})

t.test('on Redis, a clock move whose expiries cannot be moved with it is answered as made, so that it is never made twice', { skip: redisSkipped }, async (t) => {
  const { lines, logStream } = captureLogs()
  const { proxy, api, ops } = await throughProxy(t, { LOG_LEVEL: 'warn' }, { logStream })
  const { basePath } = (await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})).json as Sandbox
  // A key that expires: a session.
  await new Api(api.app, basePath).register()
  proxy.arm(sandboxScripts.expireSooner, 'drop-connection')
  const moved = await opsCall(t, ops, 'advanceSandboxClock', 'POST', `${basePath}/clock/advance`, { seconds: 60 })
  t.same([moved.status, (moved.json as { aheadSeconds: number }).aheadSeconds, proxy.injected], [200, 60, ['drop-connection']], 'moved, once')
  t.ok(lines.some((line) => line.includes('a sandbox\'s clock moved on, but not the expiries of what it keeps')), 'and logged')
})

t.test('on Redis, a sandbox no request uses for SANDBOX_IDLE_SECONDS is deleted, once, by whichever instance finds it first; and so are the keys of a generation left over', { skip: redisSkipped }, async (t) => {
  const keyPrefix = redisKeyPrefix(t)
  // What an instance that died between a reset and the deletion of the generation before would leave.
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const orphan = randomUUID()
  await redis.hset(`${keyPrefix}sandbox:${orphan}:1:items`, 'an-item', '{}')
  await redis.sadd(`${keyPrefix}sandbox-leftovers`, `${orphan}:1`)
  const { lines, logStream } = captureLogs()
  const opsPort = await freePort()
  const env = { STORE: 'redis', REDIS_KEY_PREFIX: keyPrefix, SANDBOXES: 'on', SANDBOX_IDLE_SECONDS: '1', LOG_LEVEL: 'info' }
  const a = await build(t, { ...env, OPS_PORT: String(opsPort) }, { logStream })
  const b = await build(t, { ...env, OPS_PORT: String(await freePort()) }, { logStream })
  const made = await opsCall(t, `http://127.0.0.1:${opsPort}`, 'createSandbox', 'POST', '/sandboxes', {})
  const { basePath } = made.json as Sandbox
  await until('the idle sandbox deleted', () => lines.some((line) => line.includes('idle sandbox deleted')))
  t.equal(lines.filter((line) => line.includes('idle sandbox deleted')).length, 1, 'by one instance')
  t.equal((await b.app.inject({ method: 'GET', url: `${basePath}/health/live` })).statusCode, 404, 'gone on both')
  t.equal((await a.app.inject({ method: 'GET', url: `${basePath}/health/live` })).statusCode, 404)
  t.same([await redis.exists(`${keyPrefix}sandbox:${orphan}:1:items`), await redis.scard(`${keyPrefix}sandbox-leftovers`)], [0, 0], 'the generation left over is deleted, and forgotten')
})
