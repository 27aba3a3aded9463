// A proxy in front of a real service, as a client meets one over a bad network: it records what it forwards, and
// injects the faults it is told to, each once: an answer lost after the service made it, a 429 or 503 in the
// service's shape that never reaches the service, a 502 in another proxy's HTML, a 504 `OUTCOME_UNKNOWN` for a
// request the service did make, or a 307 to another origin.
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Forwarded {
  method: string
  url: string
  status: number
  idempotencyKey: string | undefined
  replayed: string | null
  /** The request's end-to-end header fields, as they reached the service. */
  headers: Readonly<Record<string, string>>
  /** Whether the client got this answer (false: the connection was cut, or a 504 sent, instead). */
  answered: boolean
}

/** A fault for the first request that `matches` (method and URL, query included). */
export interface Fault {
  matches: { method: string, url: string }
  /**
   * `drop`: forwarded, and the connection cut instead of answering; 504: forwarded, and answered `OUTCOME_UNKNOWN`;
   * another status: answered so, not forwarded.
   */
  fault: 'drop' | 307 | 429 | 502 | 503 | 504
  /** The Retry-After of a 429 or 503: 1 when left out. */
  retryAfter?: number
  /** The origin a 307 sends the request on to, its path kept. */
  location?: string
}

export interface FaultyProxy {
  url: string
  /** What reached the service, in order, with what it answered. */
  forwarded: Forwarded[]
  /** The faults injected so far, as `METHOD url fault`. */
  injected: string[]
  /** One more fault for the next request that matches. */
  inject: (fault: Fault) => void
  close: () => Promise<void>
}

const HOP_BY_HOP = new Set(['host', 'connection', 'keep-alive', 'content-length', 'transfer-encoding'])

export async function faultyProxy (target: string, faults: readonly Fault[]): Promise<FaultyProxy> {
  const forwarded: Forwarded[] = []
  const injected: string[] = []
  const pending = [...faults]
  const forward = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const [method, url] = [String(request.method), String(request.url)]
    const index = pending.findIndex(({ matches }) => matches.method === method && matches.url === url)
    const [injecting] = index === -1 ? [] : pending.splice(index, 1)
    const fault = injecting?.fault
    if (fault !== undefined) injected.push(`${method} ${url} ${fault}`)
    if (fault === 429 || fault === 503) {
      const code = fault === 429 ? 'RATE_LIMITED' : 'SERVICE_UNAVAILABLE'
      response.writeHead(fault, { 'content-type': 'application/json', 'retry-after': String(injecting?.retryAfter ?? 1) })
      response.end(JSON.stringify({ code, message: 'Injected by the proxy.' }))
      return
    }
    if (fault === 307) {
      response.writeHead(307, { location: `${injecting?.location ?? ''}${url}` })
      response.end()
      return
    }
    if (fault === 502) {
      response.writeHead(502, { 'content-type': 'text/html' })
      response.end('<html><body><h1>502 Bad Gateway</h1></body></html>')
      return
    }
    // The end-to-end headers: fetch sets the connection's own.
    const headers = Object.fromEntries(Object.entries(request.headers).filter((entry): entry is [string, string] =>
      typeof entry[1] === 'string' && !HOP_BY_HOP.has(entry[0])))
    const answer = await fetch(`${target}${url}`, { method, headers, ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }) })
    const body = Buffer.from(await answer.arrayBuffer())
    const answered = fault !== 'drop' && fault !== 504
    forwarded.push({ method, url, status: answer.status, idempotencyKey: headers['idempotency-key'], replayed: answer.headers.get('idempotent-replayed'), headers, answered })
    if (fault === 504) {
      response.writeHead(504, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ code: 'OUTCOME_UNKNOWN', message: 'Injected by the proxy.' }))
      return
    }
    if (!answered) {
      request.socket.destroy()
      return
    }
    response.writeHead(answer.status, Object.fromEntries([...answer.headers].filter(([name]) => !HOP_BY_HOP.has(name))))
    response.end(body)
  }
  const server = createServer((request, response) => { forward(request, response).catch(() => { response.destroy() }) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    forwarded,
    injected,
    inject: (fault) => { pending.push(fault) },
    close: async () => { server.closeAllConnections(); await new Promise((resolve) => server.close(resolve)) }
  }
}
