// The official client's sandbox helper (clients/typescript/src/sandboxes.ts) against a real listening server with
// SANDBOXES=on: a sandbox made from fixtures, the client bound to it, its events read and delivered, its clock, a reset
// and the deletion.
import { randomUUID } from 'node:crypto'
import { Webhook } from 'standardwebhooks'
import t from 'tap'
import { createSandboxClient, ItemsApiError, ok } from '../../clients/typescript/src/index.js'
import { freePort } from '../../harness/net.js'
import { startReceiver } from '../../harness/webhook-receiver.js'
import { build } from '../support/app.js'
import { contractMiddleware } from '../support/contract-checks.js'
import { HANG_MS } from '../support/wait.js'

const OPS_TOKEN = 'an-operations-token-for-the-test'

t.test('createSandboxClient makes a sandbox from fixtures and gives the official client bound to it', async (t) => {
  const opsPort = await freePort()
  const api = await build(t, { STORE: 'memory', SANDBOXES: 'on', OPS_PORT: String(opsPort), OPS_TOKEN })
  const baseUrl = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const operationsUrl = `http://127.0.0.1:${opsPort}`
  const password = 'correct horse battery staple'
  const adaId = randomUUID()
  const fixtures = { users: [{ id: adaId, email: 'ada@example.com', password, firstName: 'Ada', lastName: 'Lovelace', role: 'contributor' }] }
  const sandboxed = await createSandboxClient({ baseUrl: `${baseUrl}/`, operationsUrl, operationsToken: OPS_TOKEN, fixtures })
  t.equal(sandboxed.sandbox.basePath, `/sandboxes/${sandboxed.sandbox.id}`)
  const { client } = sandboxed
  client.api.use(contractMiddleware)
  t.equal((await client.signIn('ada@example.com', password)).user.id, adaId, 'its fixtures are in')
  const item = await ok(client.api.POST('/v1/items', { body: { name: 'Difference engine' } }))
  t.equal((await client.items.list()).pagination.total, 1, 'its list is its own')
  t.same((await sandboxed.events()).events.map(({ event }) => event.subject), [item.id], 'and so are its events')
  const receiver = await startReceiver()
  t.teardown(receiver.stop)
  const secret = `whsec_${Buffer.from('the test receiver\'s secret, 24 bytes or more').toString('base64')}`
  await sandboxed.webhook({ url: receiver.url, secret })
  const delivered = await ok(client.api.POST('/v1/items', { body: { name: 'Analytical engine' } }))
  const [received] = await receiver.waitFor(1, HANG_MS)
  const event = new Webhook(secret).verify(received!.body, Object.fromEntries(Object.entries(received!.headers).map(([name, value]) => [name, String(value)])))
  t.match(event, { type: 'items.item.added', subject: delivered.id }, 'its events are delivered, signed, to the receiver it names')
  await sandboxed.webhook(undefined)

  const { data: journaled, response } = await client.api.POST('/v1/items', { body: { name: 'Journaled' } })
  const entry = await sandboxed.waitFor({ requestId: response.headers.get('x-request-id')!, type: 'items.item.added' })
  const { events } = await sandboxed.events()
  t.same([entry.operationId, entry.status, events.find(({ event }) => event.id === entry.events[0]?.id)?.event.subject], ['createItem', 201, journaled?.id],
    'its journal ties a create to the event it caused')
  const removal = sandboxed.waitFor({ operationId: 'deleteItem', after: entry.position }, HANG_MS / 1000)
  await ok(client.api.DELETE('/v1/items/{itemId}', { params: { path: { itemId: journaled!.id } } }))
  t.match(await removal, { operationId: 'deleteItem', status: 204, events: [{ type: 'items.item.removed' }] }, 'and waits for what follows')
  t.same((await sandboxed.journal({ operationId: 'deleteItem' })).entries, [await removal], 'which the journal lists')
  await t.rejects(sandboxed.waitFor({ requestId: 'never-sent' }, 1), /no entry of the sandbox's journal matched \{"requestId":"never-sent"\} within 1 s/, 'and a wait for what never comes gives up in its time')
  t.equal((await sandboxed.advanceClock(901)).aheadSeconds, 901, 'its clock moves on')
  t.equal((await client.items.list()).pagination.total, 2, 'past its access token\'s lifetime, the client refreshes its session')

  await sandboxed.reset()
  t.equal((await client.signIn('ada@example.com', password)).user.id, adaId, 'a reset puts its fixtures back')
  t.equal((await client.items.list()).pagination.total, 0, 'and nothing else')
  await sandboxed.delete()
  // Past its base, no operation of the contract is served: the 404 of a route that does not exist.
  client.api.eject(contractMiddleware)
  t.match(await client.items.list().catch((error: unknown) => error), { status: 404, code: 'NOT_FOUND' }, 'a deleted sandbox answers no more')

  const refused = await createSandboxClient({ baseUrl, operationsUrl, fetch: globalThis.fetch }).catch((error: unknown) => error)
  t.match(refused, { status: 401, code: 'AUTHENTICATION_REQUIRED' }, 'the operations token is required when set')
  t.ok(refused instanceof ItemsApiError)
})
