import { createHmac } from 'node:crypto'
import { Agent, type Dispatcher } from 'undici'
import type { OutboxEvent } from '../store/store.js'
import { secretKey, type Subscription } from './subscriptions.js'

export type AttemptOutcome =
  | { readonly delivered: true, readonly status: number }
  | { readonly delivered: false, readonly reason: string }

// What is read of a subscriber's answer at most: only its status matters.
const MAX_RESPONSE_BYTES = 64 * 1024

const timedOut = (): DOMException => new DOMException('The operation was aborted due to timeout', 'TimeoutError')

/**
 * One attempt as undici's dispatcher drives it, ended by its status, its error or its deadline, whichever comes
 * first, with one timer. Hand-written on `dispatch` rather than `request`, whose response body stream and
 * AbortSignal cost measurably more per attempt (docs/performance.md).
 */
class Attempt implements Dispatcher.DispatchHandler {
  readonly #settle: (outcome: AttemptOutcome) => void
  readonly #deadline: NodeJS.Timeout
  #controller: Dispatcher.DispatchController | undefined
  #status = 0
  #received = 0
  #ended = false

  constructor (settle: (outcome: AttemptOutcome) => void, timeoutMs: number) {
    this.#settle = settle
    this.#deadline = setTimeout(() => {
      const error = timedOut()
      this.#end(error)
      this.#controller?.abort(error)
    }, timeoutMs).unref()
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    // Started after its deadline (it waited for a connection): it is ended already.
    if (this.#ended) controller.abort(timedOut())
    else this.#controller = controller
  }

  onResponseStart (_controller: Dispatcher.DispatchController, statusCode: number): void {
    this.#status = statusCode
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#received += chunk.length
    if (this.#received <= MAX_RESPONSE_BYTES) return
    this.#end()
    controller.abort(new Error(`the answer passed ${MAX_RESPONSE_BYTES} bytes`))
  }

  onResponseEnd (): void {
    this.#end()
  }

  onResponseError (_controller: Dispatcher.DispatchController, error: Error): void {
    this.#end(error)
  }

  // The status settles it once it has come: a body cut off or still arriving at the deadline changes nothing.
  #end (error?: Error): void {
    if (this.#ended) return
    this.#ended = true
    clearTimeout(this.#deadline)
    const status = this.#status
    if (status >= 200 && status < 300) this.#settle({ delivered: true, status })
    else if (status !== 0) this.#settle({ delivered: false, reason: `answered ${status}` })
    // "TimeoutError: The operation was aborted due to timeout", "Error: connect ECONNREFUSED 127.0.0.1:4000", …
    else this.#settle({ delivered: false, reason: String(error) })
  }
}

/**
 * POSTs events to one subscriber as CloudEvents structured JSON, signed per Standard Webhooks 1.0, over a keep-alive
 * pool of its own of at most `connections` connections, so a subscriber that holds them up delays no other, even
 * on the same origin. Redirects are not followed: a 3xx is a failed attempt, like any status but 2xx.
 */
export class WebhookSender {
  readonly #origin: string
  readonly #path: string
  readonly #key: Buffer
  readonly #agent: Agent
  readonly #timeoutMs: number

  /**
   * `timeoutMs` bounds a whole attempt, whatever the receiver does: connecting, sending, waiting for the status and
   * reading the body.
   */
  constructor (subscription: Subscription, options: { timeoutMs: number, connections: number }) {
    const url = new URL(subscription.url)
    this.#origin = url.origin
    this.#path = url.pathname + url.search
    this.#key = secretKey(subscription.secret)
    this.#timeoutMs = options.timeoutMs
    this.#agent = new Agent({ connections: options.connections, keepAliveTimeout: 30_000 })
  }

  /** One attempt; never rejects: a timeout, a refused connection or a non-2xx status is a failed outcome. */
  async send (event: OutboxEvent): Promise<AttemptOutcome> {
    const timestamp = String(Math.floor(Date.now() / 1000))
    return await new Promise((resolve) => {
      this.#agent.dispatch({
        origin: this.#origin,
        path: this.#path,
        method: 'POST',
        headers: {
          'content-type': 'application/cloudevents+json',
          'user-agent': 'items-service',
          'webhook-id': event.id,
          'webhook-timestamp': timestamp,
          'webhook-signature': this.#signature(event, timestamp)
        },
        body: event.body
      }, new Attempt(resolve, this.#timeoutMs))
    })
  }

  // Standard Webhooks' v1 signature, made with node:crypto: the standardwebhooks package signs with a pure-JS HMAC
  // several times as costly per delivery (docs/performance.md); the tests verify with that package.
  #signature (event: OutboxEvent, timestamp: string): string {
    return `v1,${createHmac('sha256', this.#key).update(`${event.id}.${timestamp}.`).update(event.body).digest('base64')}`
  }

  /** Waits for the attempts in progress, or ends them at once when `abort` is set. */
  async close (abort: boolean): Promise<void> {
    await (abort ? this.#agent.destroy() : this.#agent.close())
  }
}
