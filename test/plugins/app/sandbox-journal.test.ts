// A sandbox's journal (GET /sandboxes/{sandboxId}/journal): an entry for every request it served, with the events
// each caused, filtered, paged and awaited, on each store; on Redis, a wait on one instance ended by a request on
// another; and its bounds met as an attacker would (waits held by the thousand, a journal filled by one worker).
import { randomUUID } from 'node:crypto'
import { Agent, get } from 'node:http'
import t, { type Test } from 'tap'
import type { operations } from '../../../generated/operations/openapi.js'
import { freePort } from '../../../harness/net.js'
import { JOURNAL_WAITS, JOURNAL_WAITS_PER_SANDBOX, SANDBOX_JOURNAL_ENTRIES } from '../../../src/domain/journal.js'
import { Api } from '../../support/api.js'
import { build } from '../../support/app.js'
import { opsCall } from '../../support/ops.js'
import { redisKeyPrefix } from '../../support/redis.js'
import { onEachStore, redisSkipped, type Sandbox, withSandboxes } from '../../support/sandboxes.js'
import { until } from '../../support/wait.js'

type Journal = operations['listSandboxJournal']['responses'][200]['content']['application/json']

const idOf = (sandbox: Api): string => sandbox.base.split('/')[2]!

async function journal (t: Test, ops: string, sandbox: Api | string, query = ''): Promise<Journal> {
  const { status, json } = await opsCall(t, ops, 'listSandboxJournal', 'GET', `/sandboxes/${typeof sandbox === 'string' ? sandbox : idOf(sandbox)}/journal${query}`)
  if (status !== 200) throw new Error(`listSandboxJournal answered ${status}: ${JSON.stringify(json)}`)
  return json as Journal
}

/**
 * A wait for what `query` filters, sent again while it ends empty, as the client's waitFor does: a machine busy past
 * the contract's longest wait makes it take longer, not fail.
 */
async function awaited (t: Test, ops: string, sandbox: Api | string, query: string): Promise<Journal> {
  for (;;) {
    const page = await journal(t, ops, sandbox, `${query}&waitSeconds=30`)
    if (page.entries.length > 0) return page
  }
}

/** The waits on journals the instance holds, as its metrics say. */
async function waitsHeld (ops: string): Promise<number> {
  const text = await (await fetch(`${ops}/metrics`)).text()
  return Number(/^items_service_sandbox_journal_waits\{state="held"\} (\d+)$/m.exec(text)?.[1] ?? Number.NaN)
}

onEachStore('a sandbox\'s journal has an entry for each request it served, with the event each caused, filtered and paged', async (t, store) => {
  const { api, ops, create } = await withSandboxes(t, store, { MAX_ITEMS_PER_USER: '1' })
  const sandbox = await create()
  const other = await create()
  const alice = await sandbox.register()
  const created = await sandbox.call('createItem', { token: alice.accessToken, body: { name: 'journaled' }, headers: { 'idempotency-key': 'order-42', 'x-request-id': 'rig-worker-7:test-3' } })
  const replayed = await sandbox.call('createItem', { token: alice.accessToken, body: { name: 'journaled' }, headers: { 'idempotency-key': 'order-42' } })
  const item = created.json() as { id: string }
  const missing = await sandbox.call('getItem', { token: alice.accessToken, params: { itemId: randomUUID() } })
  const edited = await sandbox.call('updateItem', { token: alice.accessToken, params: { itemId: item.id }, body: { name: 'renamed' } })
  const refused = await sandbox.call('createItem', { token: alice.accessToken, body: { name: 'one too many' } })
  await api.register()

  const { entries, next } = await journal(t, ops, sandbox)
  t.same(entries.map(({ operationId, status }) => [operationId, status]),
    [['registerUser', 201], ['createItem', 201], ['createItem', 201], ['getItem', 404], ['updateItem', 200], ['createItem', 403]], 'each request, in the order it was answered, the service\'s own not among them')
  const [registered, create1, replay, get, edit, refusal] = entries
  t.same([create1!.requestId, replay!.requestId, get!.requestId, edit!.requestId],
    ['rig-worker-7:test-3', replayed.headers['x-request-id'], missing.headers['x-request-id'], edited.headers['x-request-id']], 'named by its x-request-id, the caller\'s own when it sent one')
  t.same([registered!.accountId, create1!.accountId, create1!.idempotencyKey, replay!.idempotencyKey, get!.idempotencyKey], [null, alice.user.id, 'order-42', 'order-42', null],
    'with the acting account and its Idempotency-Key')
  t.equal(refused.json().code, 'ITEM_QUOTA_EXCEEDED')
  t.equal(next, refusal!.position, 'the page says where the next begins')
  t.ok(entries.every(({ time }) => Math.abs(Date.parse(time) - Date.now()) < 3_600_000), 'each at its time on the sandbox\'s clock')

  const events = (await opsCall(t, ops, 'listSandboxEvents', 'GET', `${sandbox.base}/events`)).json as { events: Array<{ event: { id: string, type: string, requestid: string } }> }
  t.same(events.events.map(({ event }) => [event.type, event.requestid]), [['items.item.added', 'rig-worker-7:test-3'], ['items.item.edited', edit!.requestId]], 'each event names its request')
  t.same([create1!.events, replay!.events, get!.events, edit!.events, refusal!.events],
    [[{ id: events.events[0]!.event.id, type: 'items.item.added' }], [], [], [{ id: events.events[1]!.event.id, type: 'items.item.edited' }], []],
    'and each entry its events: a replay and a refusal caused none, though the store built a create\'s event to commit with it')

  t.same((await journal(t, ops, sandbox, '?requestId=rig-worker-7:test-3')).entries, [create1], 'by request id')
  t.same((await journal(t, ops, sandbox, '?idempotencyKey=order-42')).entries, [create1, replay], 'by Idempotency-Key')
  t.same((await journal(t, ops, sandbox, '?operationId=getItem')).entries, [get], 'by operation')
  t.same((await journal(t, ops, sandbox, '?type=items.item.edited')).entries, [edit], 'by the type of an event it caused')
  const firstTwo = await journal(t, ops, sandbox, '?limit=2')
  t.same([firstTwo.entries, firstTwo.next], [[registered, create1], create1!.position], 'a page of two')
  t.same((await journal(t, ops, sandbox, `?after=${firstTwo.next}&limit=2`)).entries, [replay, get], 'and the next')
  t.same(await journal(t, ops, sandbox, `?after=${next}`), { entries: [], next }, 'none after the last: the same place again')
  t.same((await journal(t, ops, other)).entries, [], 'another sandbox\'s journal has none of them')
  t.equal((await opsCall(t, ops, 'listSandboxJournal', 'GET', `/sandboxes/${randomUUID()}/journal`)).status, 404, 'a sandbox that does not exist has none')
  t.equal((await opsCall(t, ops, 'listSandboxJournal', 'GET', `${sandbox.base}/journal?after=later`)).status, 400, 'a place that is none is refused')

  await opsCall(t, ops, 'resetSandbox', 'POST', `${sandbox.base}/reset`)
  t.same((await journal(t, ops, sandbox)).entries, [], 'a reset empties it')
  await sandbox.register()
  const afterReset = await journal(t, ops, sandbox, `?after=${next}`)
  t.same(afterReset.entries.map(({ operationId }) => operationId), ['registerUser'], 'and a reader\'s place from before it stays behind what follows')
  await opsCall(t, ops, 'deleteSandbox', 'DELETE', sandbox.base)
  t.equal((await opsCall(t, ops, 'listSandboxJournal', 'GET', `${sandbox.base}/journal`)).status, 404, 'a deletion deletes it')
})

onEachStore('a wait on a journal ends when an entry that matches is added, or empty when its time is up; the process closing ends it at once', async (t, store) => {
  const { ops, create, api } = await withSandboxes(t, store)
  const sandbox = await create()
  const alice = await sandbox.register()
  const { next } = await journal(t, ops, sandbox)

  const awaiting = awaited(t, ops, sandbox, `?after=${next}&type=items.item.added`)
  await until('the wait to be held', async () => await waitsHeld(ops) === 1)
  await sandbox.call('listItems', { token: alice.accessToken })
  const item = await sandbox.createItem(alice.accessToken, { name: 'awaited' })
  const ended = await awaiting
  t.same(ended.entries.map(({ operationId, status, events }) => [operationId, status, events.map(({ type }) => type)]), [['createItem', 201, ['items.item.added']]],
    'the create ends it (the list before it does not match)')
  const events = (await opsCall(t, ops, 'listSandboxEvents', 'GET', `${sandbox.base}/events`)).json as { events: Array<{ event: { id: string, subject: string } }> }
  t.same(events.events.map(({ event }) => [event.id, event.subject]), [[ended.entries[0]!.events[0]!.id, item.id]], 'naming the event it caused')
  t.equal(await waitsHeld(ops), 0, 'and it is held no longer')

  const nothing = await journal(t, ops, sandbox, `?after=${ended.next}&waitSeconds=1`)
  t.same(nothing, { entries: [], next: ended.next }, 'none added in its time: empty, at the same place')

  // Over a kept-alive connection, as a rig's client holds one.
  const pending = new Promise<{ connection: string | undefined, body: Journal }>((resolve, reject) => {
    get(`${ops}/sandboxes/${idOf(sandbox)}/journal?after=${ended.next}&waitSeconds=30`, { agent: new Agent({ keepAlive: true }) }, (response) => {
      let text = ''
      response.on('data', (chunk: Buffer) => { text += chunk.toString() })
      response.on('end', () => { resolve({ connection: response.headers.connection, body: JSON.parse(text) as Journal }) })
    }).on('error', reject)
  })
  await until('the wait to be held', async () => await waitsHeld(ops) === 1)
  const closing = api.app.close()
  t.same(await pending, { connection: 'close', body: { entries: [], next: ended.next } }, 'closing answers a wait at once, and lets its connection go with it')
  await closing
})

onEachStore('waits are bounded per sandbox and in all: one more is refused at once, and a journal keeps its newest entries', async (t, store) => {
  const { ops, create } = await withSandboxes(t, store, { SANDBOX_LIMIT: '40' })
  const sandboxes = await Promise.all(Array.from({ length: Math.ceil(JOURNAL_WAITS / JOURNAL_WAITS_PER_SANDBOX) + 1 }, create))
  const [first] = sandboxes
  const { next } = await journal(t, ops, first!)
  // Each sent again while it ends empty (see `awaited`).
  const wait = async (sandbox: Api): Promise<Journal> => {
    for (;;) {
      const response = await fetch(`${ops}/sandboxes/${idOf(sandbox)}/journal?after=${next}&waitSeconds=30`)
      if (response.status !== 200) throw new Error(`a held wait answered ${response.status}`)
      const page = (await response.json()) as Journal
      if (page.entries.length > 0) return page
    }
  }
  const held = Array.from({ length: JOURNAL_WAITS_PER_SANDBOX }, async () => await wait(first!))
  await until('the waits on one sandbox to be held', async () => await waitsHeld(ops) === JOURNAL_WAITS_PER_SANDBOX)
  const onePast = await opsCall(t, ops, 'listSandboxJournal', 'GET', `${first!.base}/journal?waitSeconds=30`)
  t.same([onePast.status, (onePast.json as { code: string }).code], [429, 'RATE_LIMITED'], `the ${JOURNAL_WAITS_PER_SANDBOX + 1}th on one sandbox is refused at once`)
  t.equal((await journal(t, ops, first!)).entries.length, 0, 'a read that does not wait is served')

  const rest = sandboxes.slice(1)
  for (let index = JOURNAL_WAITS_PER_SANDBOX; index < JOURNAL_WAITS; index += 1) held.push(wait(rest[Math.floor(index / JOURNAL_WAITS_PER_SANDBOX) - 1]!))
  await until('every wait to be held', async () => await waitsHeld(ops) === JOURNAL_WAITS)
  const pastAll = await opsCall(t, ops, 'listSandboxJournal', 'GET', `${rest.at(-1)!.base}/journal?waitSeconds=30`)
  t.same([pastAll.status, (pastAll.json as { message: string }).message], [429, 'This instance holds as many waits on sandboxes\' journals as it allows; try again when one ends.'],
    `one past ${JOURNAL_WAITS} in all is refused at once`)

  // Every sandbox's requests end the waits on it, and only those.
  for (const sandbox of sandboxes) await sandbox.call('listItems')
  const answers = await Promise.all(held)
  t.same(new Set(answers.map(({ entries }) => entries.map(({ operationId }) => operationId).join())), new Set(['listItems']), 'each wait ends with its sandbox\'s entry')
  t.equal(await waitsHeld(ops), 0)

  for (let request = 0; request < SANDBOX_JOURNAL_ENTRIES + 10; request += 1) await first!.call('listItems')
  const kept = await journal(t, ops, first!, '?limit=1000')
  const mine = await journal(t, ops, sandboxes[1]!)
  t.same([kept.entries.length, mine.entries.length], [SANDBOX_JOURNAL_ENTRIES, 1], 'one worker filling its journal keeps its newest entries, and leaves another\'s as it was')
  t.same((await journal(t, ops, first!, `?after=${kept.next}`)).entries.length, 0)
})

t.test('on Redis, a wait on one instance is ended by a request another instance serves', { skip: redisSkipped }, async (t) => {
  const REDIS_KEY_PREFIX = redisKeyPrefix(t)
  const instance = async (): Promise<{ api: Api, ops: string }> => {
    const opsPort = await freePort()
    return { api: await build(t, { STORE: 'redis', REDIS_KEY_PREFIX, SANDBOXES: 'on', OPS_PORT: String(opsPort) }), ops: `http://127.0.0.1:${opsPort}` }
  }
  const [a, b] = [await instance(), await instance()]
  const { json } = await opsCall(t, a.ops, 'createSandbox', 'POST', '/sandboxes', {})
  const { basePath } = json as Sandbox
  const onA = new Api(a.api.app, basePath)
  const onB = new Api(b.api.app, basePath)
  const alice = await onA.register()
  const { next } = await journal(t, a.ops, basePath.split('/')[2]!)
  const awaiting = awaited(t, a.ops, basePath.split('/')[2]!, `?after=${next}&operationId=createItem`)
  await until('the wait to be held', async () => await waitsHeld(a.ops) === 1)
  const item = await onB.createItem(alice.accessToken, { name: 'on b' })
  const ended = await awaiting
  t.same(ended.entries.map(({ operationId, status }) => [operationId, status]), [['createItem', 201]], 'the create on b ends the wait on a')
  t.same((await journal(t, b.ops, basePath.split('/')[2]!, `?after=${next}`)).entries, ended.entries, 'both read the same journal')
  t.ok(item.id !== undefined)
})
