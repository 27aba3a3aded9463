// One subscriber's sender against real receivers on local ports: how an attempt ends.
import { once } from 'node:events'
import { createServer } from 'node:http'
import { type AddressInfo, createServer as createNetServer } from 'node:net'
import t from 'tap'
import { WebhookSender } from '../../src/webhooks/sender.js'
import type { Subscription } from '../../src/webhooks/subscriptions.js'

const SECRET = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
const subscription = (url: string): Subscription => ({ id: 'subscriber', url, secret: SECRET, channels: ['items.item.added'] })
const event = (id: string): { id: string, channel: string, body: string } => ({ id, channel: 'items.item.added', body: JSON.stringify({ id }) })

t.test('an answer longer than is read ends the attempt at its status, with its connection, long before its deadline', async (t) => {
  let closed: () => void = () => {}
  const connectionClosed = new Promise<void>((resolve) => { closed = resolve })
  // 200, then twice the bytes an attempt reads, then a body that never ends.
  const server = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      response.writeHead(200)
      response.write(Buffer.alloc(128 * 1024, 'x'))
      response.on('close', closed)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  // A deadline past the run's own timeout: an attempt that waited for the body to end would fail the run.
  const sender = new WebhookSender(subscription(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`), { timeoutMs: 3_600_000, connections: 1 })
  t.same(await sender.send(event('long-answer')), { delivered: true, status: 200 })
  await connectionClosed
  t.pass('the sender dropped the connection of the answer it stopped reading')
  await sender.close(true)
})

t.test('an attempt whose deadline passes before its connection is made is never sent on it', async (t) => {
  let connectionClosed: (bytes: number) => void = () => {}
  const carried = new Promise<number>((resolve) => { connectionClosed = resolve })
  const server = createNetServer((socket) => {
    let bytes = 0
    socket.on('data', (chunk) => { bytes += chunk.length })
    socket.on('close', () => { connectionClosed(bytes) })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const sender = new WebhookSender(subscription(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`), { timeoutMs: 1, connections: 1 })
  const outcome = sender.send(event('late'))
  // No connection is made while this process runs on: the deadline has passed before the next turn of its event
  // loop, whose timers come before the connection's events.
  const until = performance.now() + 20
  while (performance.now() < until);
  t.same(await outcome, { delivered: false, reason: 'TimeoutError: The operation was aborted due to timeout' })
  // Waits for what was sent to end; a request sent on the connection would hold it, never answered.
  await sender.close(false)
  t.equal(await carried, 0, 'its connection was made, and carried nothing')
})
