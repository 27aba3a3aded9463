// Dead letters: a delivery given up after its last attempt is kept in the store, listed and delivered again through
// the operations API (ops/openapi.yaml), whose every answer here is checked against that contract.
import { setTimeout as sleep } from 'node:timers/promises'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import type { operations } from '../../generated/operations/openapi.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import type { Store } from '../../src/store/store.js'
import { type Api } from '../support/api.js'
import { build } from '../support/app.js'
import { freePort } from '../../harness/net.js'
import { opsCall } from '../support/ops.js'
import { HANG_MS } from '../support/wait.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'
import { redisProxy } from '../support/redis-proxy.js'
import { deadLetterScripts } from '../../src/store/redis/dead-letters.js'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { type Receiver, startReceiver } from '../../harness/webhook-receiver.js'

const SECRET = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
type DeadLetterList = operations['listDeadLetters']['responses'][200]['content']['application/json']

async function instance (t: Test, target: Receiver, env: NodeJS.ProcessEnv = {}, store?: Store): Promise<{ api: Api, ops: string }> {
  const opsPort = await freePort()
  const api = await build(t, {
    OPS_PORT: String(opsPort),
    WEBHOOKS: JSON.stringify([{ url: target.url, secret: SECRET }]),
    // One retry, soon: a delivery is given up at its second failed attempt.
    WEBHOOK_RETRY_DELAYS_MS: '10',
    ...env
  }, store === undefined ? {} : { store })
  return { api, ops: `http://127.0.0.1:${opsPort}` }
}

/** Waits until the subscriber holds `count` dead letters, and lists them. */
async function deadLetters (t: Test, ops: string, count: number): Promise<DeadLetterList> {
  for (const givesUp = Date.now() + 10_000; ; await sleep(20)) {
    const { json } = await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters?events=true')
    const list = json as DeadLetterList
    if (list.subscribers[0]?.total === count || Date.now() > givesUp) return list
  }
}

t.test('a delivery given up is listed with its event and failure, and delivered again with its webhook-id, freshly signed', async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  target.answer(500, 500)
  const { api, ops } = await instance(t, target)
  const { accessToken } = await api.register({ role: 'contributor' })
  const item = await api.createItem(accessToken)
  const list = await deadLetters(t, ops, 1)
  const [deadLetter] = list.subscribers[0]?.deadLetters ?? []
  t.match(list, { subscribers: [{ subscriber: target.url, total: 1 }] })
  t.match(deadLetter, { channel: 'items.item.added', attempts: 2, failure: 'answered 500', event: { type: 'items.item.added' } })
  t.match(JSON.stringify(deadLetter?.event), item.id, 'the event as the subscriber was to receive it')
  const [first] = await target.waitFor(2)

  t.match(await opsCall(t, ops, 'listDeadLetters', 'GET', `/webhooks/dead-letters?subscriber=${encodeURIComponent('http://127.0.0.1:1/other')}`), { status: 404, json: { code: 'NOT_FOUND' } })
  t.match(await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters?limit=0'), { status: 400, json: { details: [{ field: 'limit' }] } })
  t.match(await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters?limit=0x10'), { status: 400, json: { details: [{ field: 'limit', issue: 'must be a number written in decimal digits' }] } }, 'decimal digits only')
  t.match(await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters?after=1'), { status: 400, json: { details: [{ field: 'after', issue: 'requires subscriber' }] } })
  t.notOk('event' in ((await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters')).json as DeadLetterList).subscribers[0]!.deadLetters[0]!,
    'an event only when asked for')
  t.match(await opsCall(t, ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', { eventIds: ['not-a-uuid'] }), { status: 400 })

  // Webhook timestamps are in seconds: the next one is fresh if it is later.
  await sleep(1000)
  t.same((await opsCall(t, ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', { subscriber: target.url, eventIds: [`urn:uuid:${deadLetter!.eventId.toUpperCase()}`] })).json, { redelivered: 1 }, 'by its id in any spelling')
  const [again] = (await target.waitFor(3)).slice(2)
  t.equal(again?.headers['webhook-id'], deadLetter!.eventId, 'the same webhook-id as the original, so a receiver can tell')
  t.equal(again?.body, first?.body, 'the same event')
  t.ok(Number(again?.headers['webhook-timestamp']) > Number(first?.headers['webhook-timestamp']), 'a fresh timestamp')
  t.doesNotThrow(() => new Webhook(SECRET).verify(again?.body ?? '', again?.headers as Record<string, string>), 'and a signature that verifies')
  t.same((await deadLetters(t, ops, 0)).subscribers, [{ subscriber: target.url, total: 0, deadLetters: [] }])
})

t.test('on Redis, a dead letter outlives the instance that gave it up and is delivered by another', { skip: await redisSkip() }, async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  target.answer(500, 500)
  const env = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  const first = await instance(t, target, env)
  const { accessToken } = await first.api.register({ role: 'contributor' })
  await first.api.createItem(accessToken)
  const [deadLetter] = (await deadLetters(t, first.ops, 1)).subscribers[0]?.deadLetters ?? []
  await first.api.app.close()

  const second = await instance(t, target, env)
  t.same((await deadLetters(t, second.ops, 1)).subscribers[0]?.deadLetters, [deadLetter], 'kept in Redis')
  t.same((await opsCall(t, second.ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', {})).json, { redelivered: 1 }, 'all of them')
  const [, , again] = await target.waitFor(3)
  t.equal(again?.headers['webhook-id'], deadLetter?.eventId)
})

t.test('on Redis, a redelivery whose reply is lost is answered as made, and delivered once', { skip: await redisSkip() }, async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  target.answer(500, 500)
  const proxy = await redisProxy(REDIS_URL)
  t.teardown(proxy.close)
  // A take the worker sent on the connection cut with the reply may have leased the redelivered one: another take
  // has it once that lease ends.
  const { api, ops } = await instance(t, target, { STORE: 'redis', REDIS_URL: proxy.url, REDIS_KEY_PREFIX: redisKeyPrefix(t), WEBHOOK_TIMEOUT_MS: '500', WEBHOOK_RECLAIM_AFTER_MS: '1000' })
  const { accessToken } = await api.register({ role: 'contributor' })
  await api.createItem(accessToken)
  const [deadLetter] = (await deadLetters(t, ops, 1)).subscribers[0]?.deadLetters ?? []
  proxy.arm(deadLetterScripts.redeliverDeadLetters, 'drop-reply')
  t.same(await opsCall(t, ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', {}), { status: 200, json: { redelivered: 1 } })
  t.same(proxy.injected, ['drop-reply'], 'its reply was lost')
  const [, , again] = await target.waitFor(3, HANG_MS)
  t.equal(again?.headers['webhook-id'], deadLetter?.eventId, 'delivered again')
  t.same(await opsCall(t, ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', {}), { status: 200, json: { redelivered: 0 } }, 'once')
})

t.test('an answer the operations API takes longer than REQUEST_TIMEOUT_MS to make still reaches its client (a store slow to list)', async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  const store = createMemoryStore()
  const list = store.outbox.deadLetters.bind(store.outbox)
  store.outbox.deadLetters = async (subscriber, page) => {
    await sleep(1500)
    return await list(subscriber, page)
  }
  const { ops } = await instance(t, target, { REQUEST_TIMEOUT_MS: '1000' }, store)
  const { status, json } = await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters')
  t.same([status, json], [200, { subscribers: [{ subscriber: target.url, total: 0, deadLetters: [] }] }])
})

t.test('subscribers that differ only in their query have names of their own, which reveal no query: each one\'s dead letters are listed and redelivered apart', async (t) => {
  const target = await startReceiver()
  t.teardown(target.stop)
  target.answer(500, 500, 500, 500)
  const urls = [`${target.url}?token=secret-a`, `${target.url}?token=secret-b`]
  const opsPort = await freePort()
  const api = await build(t, {
    OPS_PORT: String(opsPort),
    WEBHOOKS: JSON.stringify(urls.map((url) => ({ url, secret: SECRET }))),
    WEBHOOK_RETRY_DELAYS_MS: '10'
  })
  const ops = `http://127.0.0.1:${opsPort}`
  const { accessToken } = await api.register({ role: 'contributor' })
  await api.createItem(accessToken)
  let list: DeadLetterList = { subscribers: [] }
  for (const givesUp = Date.now() + 10_000; Date.now() < givesUp; await sleep(20)) {
    list = (await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters')).json as DeadLetterList
    if (list.subscribers.every(({ total }) => total === 1)) break
  }
  const names = list.subscribers.map(({ subscriber }) => subscriber)
  t.equal(new Set(names).size, 2, `two names: ${names.join(', ')}`)
  t.same(list.subscribers.map(({ total }) => total), [1, 1], 'one dead letter each')
  t.notOk(names.some((name) => name.includes('secret')), 'no name quotes a query')
  const metrics = await (await fetch(`${ops}/metrics`)).text()
  for (const name of names) t.match(metrics, `items_service_webhook_dead_letters{subscriber="${name}"} 1`, `the gauge of ${name}`)
  t.same((await opsCall(t, ops, 'redeliverDeadLetters', 'POST', '/webhooks/dead-letters/redeliver', { subscriber: names[0] })).json, { redelivered: 1 }, 'by one name, that one\'s alone')
})

t.test('dead letters too large to list at once are listed a bounded page at a time: every one once, in order, the process\'s memory bounded', async (t) => {
  // The adversarial run's attack, scaled to the suite: the largest events the contract allows (a description of
  // 10 000 control characters, each escaped to six in JSON), given up by 16 subscribers (the most WEBHOOKS takes).
  const closed = await freePort()
  const urls = Array.from({ length: 16 }, (_, index) => `http://127.0.0.1:${closed}/hook-${index}`)
  const opsPort = await freePort()
  const api = await build(t, {
    OPS_PORT: String(opsPort),
    WEBHOOKS: JSON.stringify(urls.map((url) => ({ url, secret: SECRET }))),
    WEBHOOK_RETRY_DELAYS_MS: '10',
    RATE_LIMIT: 'off',
    // Room for the 120 items (about 60 KB of text each) in one account's quota.
    ACCOUNT_QUOTA_KIB: '16384'
  })
  const ops = `http://127.0.0.1:${opsPort}`
  const { accessToken } = await api.register({ role: 'contributor' })
  const created = []
  for (let index = 0; index < 120; index += 1) created.push((await api.createItem(accessToken, { name: `item ${index}`, description: '\u0001'.repeat(10_000) })).id)
  let overview: DeadLetterList = { subscribers: [] }
  for (const givesUp = Date.now() + 60_000; Date.now() < givesUp; await sleep(50)) {
    overview = (await opsCall(t, ops, 'listDeadLetters', 'GET', '/webhooks/dead-letters?limit=1')).json as DeadLetterList
    if (overview.subscribers.every(({ total }) => total === created.length)) break
  }
  t.same(overview.subscribers.map(({ total }) => total), urls.map(() => created.length), 'every subscriber gave every event up')
  const eventBytes = overview.subscribers[0]!.deadLetters[0]!.eventBytes
  t.ok(eventBytes > 60_000, `each event is large: ${eventBytes} bytes`)

  const peakBefore = process.resourceUsage().maxRSS * 1024
  const rssBefore = process.memoryUsage().rss
  let largestAnswer = 0
  const answerBound = 256 * 1024 + urls.length * (eventBytes + 1024)
  const all = await fetch(`${ops}/webhooks/dead-letters?events=true`)
  const allText = await all.text()
  largestAnswer = Math.max(largestAnswer, Buffer.byteLength(allText))
  const listedAtOnce = (JSON.parse(allText) as DeadLetterList).subscribers.map(({ deadLetters, next }) => [deadLetters.length, next !== undefined])
  t.ok(listedAtOnce.every(([count, more]) => Number(count) >= 1 && more === true), 'every subscriber\'s first page has a next')
  for (const { subscriber } of overview.subscribers) {
    const seen: string[] = []
    const failedAt: string[] = []
    let query = `subscriber=${encodeURIComponent(subscriber)}&events=true`
    for (let pages = 0; pages < created.length; pages += 1) {
      const response = await fetch(`${ops}/webhooks/dead-letters?${query}`)
      const text = await response.text()
      largestAnswer = Math.max(largestAnswer, Buffer.byteLength(text))
      const [page] = (JSON.parse(text) as DeadLetterList).subscribers
      for (const deadLetter of page?.deadLetters ?? []) {
        seen.push(String(deadLetter.event?.subject))
        failedAt.push(deadLetter.failedAt)
      }
      if (page?.next === undefined) break
      query = `subscriber=${encodeURIComponent(subscriber)}&events=true&after=${page.next}`
    }
    // In the order they were given up, which the deliveries' retries set, not the order of the creates.
    t.same([seen.length, [...seen].sort()], [created.length, [...created].sort()], `${subscriber}: every event once, across its pages`)
    t.same(failedAt, [...failedAt].sort(), 'oldest first')
  }
  t.ok(largestAnswer <= answerBound, `no answer over ${answerBound} bytes: the largest was ${largestAnswer}`)
  const peakGrowth = process.resourceUsage().maxRSS * 1024 - Math.max(peakBefore, rssBefore)
  t.ok(peakGrowth < 128 * 1024 * 1024, `the process's peak memory grew by ${Math.round(peakGrowth / 1024 / 1024)} MB while listing ${urls.length * created.length * eventBytes} bytes of events`)
})
