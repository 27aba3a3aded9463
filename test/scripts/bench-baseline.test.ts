// The benchmark's baseline must serve the service's page with the service's serializer, or every ratio
// `npm run bench` prints is wrong (or, as once, the benchmark does not start at all).
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { type Schemas } from '../support/api.js'
import { build, TEST_JWT_SECRET } from '../support/app.js'
import { repositoryModule } from '../support/processes.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

async function startBaseline (t: Test, kind: string, page: unknown, env: Record<string, string> = {}): Promise<string> {
  const baseline = spawn(process.execPath, [...process.execArgv, repositoryModule('scripts/bench/baseline-server')], {
    env: { ...process.env, BASELINE: kind, BASELINE_PAGE: JSON.stringify(page), JWT_SECRET: TEST_JWT_SECRET, ...env },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { baseline.kill() })
  return await new Promise<string>((resolve, reject) => {
    let output = ''
    baseline.stdout.on('data', (chunk: Buffer) => {
      output += String(chunk)
      const match = /listening at (\S+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    baseline.once('exit', (code) => { reject(new Error(`the baseline exited with ${code}`)) })
  })
}

/** A page of the service's, with the token of the user whose page it is: what the benchmark gives its baselines. */
async function servicePage (t: Test): Promise<{ accessToken: string, page: Schemas['ItemList'], item: Schemas['Item'] }> {
  const api = await build(t)
  const { accessToken } = await api.register()
  const item = await api.createItem(accessToken, { name: 'A benchmark item', description: null })
  return { accessToken, item, page: (await api.call('listItems', { token: accessToken })).json() }
}

t.test('the bare-Fastify baseline answers as the service does, with its validation', async (t) => {
  const { page, item } = await servicePage(t)
  const url = await startBaseline(t, 'bare', page)
  t.same(await (await fetch(`${url}/v1/items`)).json(), page)
  const itemUrl = `${url}/v1/items/${item.id}`
  const send = async (target: string, method: string, body: unknown): Promise<Response> =>
    await fetch(target, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  t.same(await (await fetch(itemUrl)).json(), item)
  const created = await send(`${url}/v1/items`, 'POST', { name: 'Created', description: null })
  t.equal(created.status, 201)
  t.same(await created.json(), item)
  t.same(await (await send(itemUrl, 'PATCH', { name: 'Edited' })).json(), item)
  // The writes validate the same bodies, and the get the same path parameter, as the service.
  t.equal((await send(`${url}/v1/items`, 'POST', { name: '' })).status, 400)
  t.equal((await send(itemUrl, 'PATCH', {})).status, 400)
  t.equal((await fetch(`${url}/v1/items/not-an-id`)).status, 400)
})

t.test('the usual-setup baseline verifies the service\'s access token and counts every request against its rate limit', async (t) => {
  const { accessToken, page } = await servicePage(t)
  const url = await startBaseline(t, 'usual', page)
  const answer = await fetch(`${url}/v1/items`, { headers: { authorization: `Bearer ${accessToken}` } })
  t.same(await answer.json(), page)
  t.match(Object.fromEntries(answer.headers), { 'x-ratelimit-limit': /^\d+$/, 'x-ratelimit-remaining': /^\d+$/, 'x-ratelimit-reset': /^\d+$/ })
  t.equal((await fetch(`${url}/v1/items`)).status, 401, 'no token, no page')
})

t.test('the Redis write anchor validates as the service does and stores each create and edit by one script', { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const url = await startBaseline(t, 'redis', {}, { REDIS_URL, REDIS_KEY_PREFIX: prefix })
  const send = async (target: string, method: string, body: unknown): Promise<Response> =>
    await fetch(target, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const created = await send(`${url}/v1/items`, 'POST', { name: 'Anchored', description: null })
  t.equal(created.status, 201)
  const item = await created.json() as Schemas['Item']
  t.match(item, { name: 'Anchored', description: null, status: 'active', id: /^[0-9a-f-]{36}$/ })
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  t.same(JSON.parse(String(await redis.hget(`${prefix}anchor:items`, item.id))), item, 'the item is stored')
  t.same(await redis.lrange(`${prefix}anchor:item-order`, 0, -1), [item.id], 'and listed')
  const edited = await send(`${url}/v1/items/${item.id}`, 'PATCH', { name: 'Edited' })
  t.equal(edited.status, 200)
  const changed = await edited.json() as Schemas['Item']
  t.match(changed, { ...item, name: 'Edited', updatedAt: /^\d{4}-/ })
  t.same(JSON.parse(String(await redis.hget(`${prefix}anchor:items`, item.id))), changed, 'the edit is stored')
  const withoutDescription = await (await send(`${url}/v1/items`, 'POST', { name: 'No description' })).json() as Schemas['Item']
  t.equal(withoutDescription.description, null, 'an item is made as the service makes it: a description left out is null')
  t.equal((await send(`${url}/v1/items`, 'POST', { name: '' })).status, 400, 'a create body is validated with the contract\'s schema')
  t.equal((await send(`${url}/v1/items/${item.id}`, 'PATCH', {})).status, 400, 'so is an edit\'s')
  t.equal((await send(`${url}/v1/items/${randomUUID()}`, 'PATCH', { name: 'Nothing' })).status, 404)
})

t.test('the usual setup on Redis verifies the service\'s token, counts each request in Redis and writes by the anchor\'s script', { skip: await redisSkip() }, async (t) => {
  const { accessToken } = await servicePage(t)
  const prefix = redisKeyPrefix(t)
  const url = await startBaseline(t, 'redis-usual', {}, { REDIS_URL, REDIS_KEY_PREFIX: prefix })
  const created = await fetch(`${url}/v1/items`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${accessToken}` }, body: JSON.stringify({ name: 'Usual' }) })
  t.equal(created.status, 201)
  t.match(Object.fromEntries(created.headers), { 'x-ratelimit-limit': /^\d+$/, 'x-ratelimit-remaining': /^\d+$/ })
  const item = await created.json() as Schemas['Item']
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  t.same(JSON.parse(String(await redis.hget(`${prefix}anchor:items`, item.id))), item, 'the item is stored by the anchor\'s script')
  t.equal((await redis.keys(`${prefix}anchor:rate-limit:*`)).length, 1, 'the request is counted in Redis, under the anchor\'s keys')
  const unsigned = await fetch(`${url}/v1/items`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Usual' }) })
  t.equal(unsigned.status, 401, 'no token, no write')
})
