// An item's write on Redis decides on the item as the instance last edited it, and Redis's guard proves that copy: one
// command when it holds, the item as it is when it does not, and nothing decided on a stale copy is ever answered.
import { randomUUID } from 'node:crypto'
import { connect } from 'node:net'
import { createInterface } from 'node:readline'
import { Redis } from 'ioredis'
import t from 'tap'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import type { Item } from '../../../src/domain/index.js'
import { storedItem, TEXT } from '../../../src/domain/serialized.js'
import { connectRedisStore } from '../../../src/store/redis/connection.js'
import type { Store } from '../../../src/store/store.js'
import type { Api, Schemas } from '../../support/api.js'
import { build } from '../../support/app.js'
import { redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../../support/redis.js'
import { account, item } from '../conformance/fixtures.js'

const skip = await redisSkip()

// A command as RESP writes it.
const resp = (...args: string[]): string => `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`

// The commands an app sent Redis that name `text` while `act` ran, in order (a commit by either of the ways a script
// is sent, `commit`), leaving out those a script called; and what `act` answered. Read off MONITOR on a socket of
// its own, each line `+<time> [<db> <source>] "<command>" "<argument>"…`.
async function sentNaming<T> (text: string, act: () => Promise<T>): Promise<{ sent: string[], answer: T }> {
  const { hostname, port, username, password } = new URL(REDIS_URL)
  const monitor = connect(Number(port || 6379), hostname)
  if (password !== '') monitor.write(resp('AUTH', ...(username === '' ? [] : [decodeURIComponent(username)]), decodeURIComponent(password)))
  monitor.write(resp('MONITOR'))
  const lines = createInterface({ input: monitor, crlfDelay: Infinity })[Symbol.asyncIterator]()
  // Its AUTH's and its MONITOR's answers.
  for (let answers = password === '' ? 1 : 2; answers > 0; answers -= 1) await lines.next()
  const sent: string[] = []
  const end = randomUUID()
  const client = new Redis(REDIS_URL)
  try {
    const answer = await act()
    // MONITOR tells each command as Redis runs it: once it tells of this one, it has told of every one before.
    await client.echo(end)
    for (;;) {
      const { value: line } = await lines.next() as { value: string }
      if (line.includes(end)) return { sent, answer }
      const [, source, command] = /^\+\S+ \[\d+ ([^\]]+)\] "([^"]+)"/.exec(line) ?? []
      if (source !== 'lua' && line.includes(text)) sent.push(/^eval/i.test(String(command)) ? 'commit' : String(command).toLowerCase())
    }
  } finally {
    monitor.destroy()
    client.disconnect()
  }
}

t.test('an edit or a delete decides on the item as the instance last edited it: one command when no other instance changed it since, and the item as it is when one did, no edit lost and no refusal made on a stale copy', { skip }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  const [a, b] = [await build(t, shared), await build(t, shared)]
  const owner = await a.register()
  const { id } = await a.createItem(owner.accessToken, { name: 'made on A' })
  const write = async (api: Api, operation: 'updateItem' | 'deleteItem', body?: Schemas['UpdateItemRequest'], ifMatch?: string): Promise<{ sent: string[], status: number, etag: string }> => {
    const { sent, answer } = await sentNaming(id, async () => await api.call(operation, {
      token: owner.accessToken, params: { itemId: id }, ...(body === undefined ? {} : { body }), ...(ifMatch === undefined ? {} : { headers: { 'if-match': ifMatch } })
    }))
    return { sent, status: answer.statusCode, etag: String(answer.headers.etag) }
  }
  const item = async (api: Api): Promise<unknown> => (await api.call('getItem', { token: owner.accessToken, params: { itemId: id } })).json()

  const first = await write(a, 'updateItem', { name: 'edited on A' })
  t.same([first.sent, first.status], [['hget', 'commit'], 200], 'A made it and keeps no copy of it: its first edit reads it')
  const second = await write(a, 'updateItem', { name: 'edited again on A' })
  t.same([second.sent, second.status], [['commit'], 200], 'A edited it last: its edit is its commit alone')
  const onB = await write(b, 'updateItem', { description: 'described on B' })
  t.same([onB.sent, onB.status], [['hget', 'commit'], 200], 'B never edited it: it reads it first')
  const stale = await write(a, 'updateItem', { name: 'named on A' })
  t.same([stale.sent, stale.status], [['commit', 'commit'], 200], 'A\'s copy is stale: its commit is refused with the item as it is, and made on that, with no read')
  t.match(await item(b), { name: 'named on A', description: 'described on B' }, 'neither edit lost')

  const matched = await write(b, 'updateItem', { name: 'matched on B' }, stale.etag)
  t.same([matched.sent, matched.status], [['hget', 'commit'], 200], 'B\'s copy is stale and fails the If-Match that the item meets: B reads the item, and it passes')
  const failed = await write(b, 'updateItem', { name: 'not made' }, onB.etag)
  t.same([failed.sent, failed.status], [['hget'], 412], 'an If-Match the item fails is 412, refused on the item read')
  t.match(await item(a), { name: 'matched on B' })

  const removed = await write(a, 'deleteItem')
  t.same([removed.sent, removed.status], [['commit', 'commit'], 204], 'A\'s stale copy: the delete is made on the item as it is')
  const gone = await write(b, 'updateItem', { name: 'too late' })
  t.same([gone.sent, gone.status], [['commit'], 404], 'B\'s copy of an item gone: its commit answers that it is gone')
  t.same(await write(b, 'deleteItem'), { sent: ['hget'], status: 404, etag: 'undefined' }, 'and B keeps no copy of it')
  t.equal((await a.call('getItem', { token: owner.accessToken, params: { itemId: id } })).statusCode, 404)
})

t.test('the copies an instance keeps of the items it edited fit their bound, those edited longest ago out first; each sandbox keeps its share of it', { skip }, async (t) => {
  const itemOf = (contributorId: string): Item => item(contributorId, { name: 'a', description: 'd'.repeat(200) })
  // What one item's copy takes (its id and text, as the contract's serializer writes it, whatever properties it has):
  // two fit the instance's bound, and one the half of it each of two sandboxes keeps.
  const copy = randomUUID().length + storedItem(itemOf(randomUUID()))[TEXT].length
  const store = await connectRedisStore({ url: REDIS_URL, keyPrefix: redisKeyPrefix(t), logger: SILENT_LOGGER, maxItemsPerContributor: 10, cache: { users: 1, sessions: 1, itemTextCharacters: Math.floor(2.5 * copy) } })
  t.teardown(async () => { await store.close() })
  const deliveries = { receiverSet: () => {}, receiverEnded: () => {}, close: async () => {} }
  const sandboxes = store.sandboxes!({ limit: 2, idleMs: 60_000, accounts: 10, quotaBytes: 1024 * 1024 }, { maxItemsPerContributor: 10, idempotencyKeys: {} }, deliveries)
  t.teardown(async () => { await sandboxes.close() })
  const { store: sandbox } = (await sandboxes.create({}))!
  const reads = async (items: Store['items'], id: string): Promise<boolean> =>
    (await sentNaming(id, async () => await items.update(id, (current) => ({ ...current, name: current.name === 'a' ? 'b' : 'a' })))).sent.includes('hget')
  for (const [catalogue, items] of [['the instance', store.items], ['a sandbox', sandbox.items]] as const) {
    const contributorId = await account(catalogue === 'a sandbox' ? sandbox.users : store.users)
    const ids: string[] = []
    for (let made = 0; made < 3; made += 1) ids.push((await items.add(itemOf(contributorId)))!.id)
    t.same([await reads(items, ids[0]!), await reads(items, ids[1]!), await reads(items, ids[2]!)], [true, true, true], `${catalogue}: none kept when made`)
    const kept = catalogue === 'a sandbox' ? [false, false, true] : [false, true, true]
    t.same([await reads(items, ids[2]!), await reads(items, ids[1]!), await reads(items, ids[0]!)].reverse(), kept.map((copy) => !copy), `${catalogue}: the newest copies kept, ${kept.filter(Boolean).length}`)
  }
})
