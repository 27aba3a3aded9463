// A webhook receiver on a local port, for the tests and the benchmark: it keeps what it receives and answers as it is
// told.
import { once } from 'node:events'
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface ReceivedWebhook {
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** How to answer a request: with a status, or never (the connection stays open until the receiver stops). */
export type Answer = number | 'hang'

export interface Receiver {
  readonly url: string
  readonly received: ReceivedWebhook[]
  /** The answers to the next requests, in order; once they are used up, 204. */
  answer: (...answers: Answer[]) => void
  /** Resolves with what was received once there are at least `count` requests; rejects after `timeoutMs`. */
  waitFor: (count: number, timeoutMs?: number) => Promise<ReceivedWebhook[]>
  /** Requests answered 'hang' whose sender has not closed their connection yet. */
  hanging: () => number
  /** Answers the requests left hanging with `status`, now. */
  release: (status: number) => void
  /** Stops listening (a sender then meets a refused connection) and drops the requests left hanging. */
  stop: () => Promise<void>
  /** Listens again, on the same port. */
  start: () => Promise<void>
}

export async function startReceiver (port = 0): Promise<Receiver> {
  const received: ReceivedWebhook[] = []
  const answers: Answer[] = []
  const hanging = new Set<ServerResponse>()
  const waiters = new Set<() => void>()
  const server = createServer((request, response) => {
    let body = ''
    request.setEncoding('utf8')
    request.on('data', (chunk: string) => { body += chunk })
    request.on('end', () => {
      received.push({ headers: request.headers, body })
      for (const waiter of waiters) waiter()
      const answer = answers.shift() ?? 204
      if (answer === 'hang') {
        hanging.add(response)
        response.on('close', () => { hanging.delete(response) })
      } else {
        response.writeHead(answer).end()
      }
    })
  })
  const start = async (): Promise<void> => {
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    port = (server.address() as AddressInfo).port
  }
  await start()
  return {
    url: `http://127.0.0.1:${port}/webhooks`,
    received,
    answer: (...next) => { answers.push(...next) },
    hanging: () => hanging.size,
    release: (status) => {
      for (const response of hanging) response.writeHead(status).end()
      hanging.clear()
    },
    waitFor: async (count, timeoutMs = 10_000) => await new Promise((resolve, reject) => {
      const check = (): void => {
        if (received.length < count) return
        waiters.delete(check)
        clearTimeout(timer)
        resolve(received.slice())
      }
      const timer = setTimeout(() => {
        waiters.delete(check)
        reject(new Error(`received ${received.length} of ${count} webhooks within ${timeoutMs} ms`))
      }, timeoutMs)
      waiters.add(check)
      check()
    }),
    stop: async () => {
      for (const response of hanging) response.socket?.destroy()
      hanging.clear()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
    start
  }
}
