import { createHmac } from 'node:crypto'
import { Agent } from 'undici'
import type { OutboxEvent } from '../store/store.js'
import { secretKey, type Subscription } from './subscriptions.js'

export type AttemptOutcome =
  | { readonly delivered: true, readonly status: number }
  | { readonly delivered: false, readonly reason: string }

// What is read of a subscriber's answer at most: only its status matters.
const MAX_RESPONSE_BYTES = 64 * 1024

/**
 * POSTs events to one subscriber as CloudEvents structured JSON, signed per Standard Webhooks 1.0, over a keep-alive
 * pool of its own of at most `connections` connections, so a subscriber that holds them up delays no other, even
 * on the same origin. Redirects are not followed: a 3xx is a failed attempt, like any status but 2xx.
 */
export class WebhookSender {
  readonly #url: URL
  readonly #key: Buffer
  readonly #agent: Agent
  readonly #timeoutMs: number

  /**
   * `timeoutMs` bounds a whole attempt, whatever the receiver does: connecting, sending, waiting for the status and
   * reading the body.
   */
  constructor (subscription: Subscription, options: { timeoutMs: number, connections: number }) {
    this.#url = new URL(subscription.url)
    this.#key = secretKey(subscription.secret)
    this.#timeoutMs = options.timeoutMs
    this.#agent = new Agent({ connections: options.connections, keepAliveTimeout: 30_000 })
  }

  /**
   * One attempt; never rejects: a timeout, a refused connection or a non-2xx status is a failed outcome. The status
   * settles it: a body still arriving at the deadline is dropped with its connection, and a 2xx stays delivered.
   */
  async send (event: OutboxEvent): Promise<AttemptOutcome> {
    // One timer, cleared when the attempt ends: an AbortSignal.timeout per attempt costs many times as much.
    const aborting = new AbortController()
    const timeout = setTimeout(() => { aborting.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')) }, this.#timeoutMs).unref()
    const outcome = await this.#attempt(event, aborting.signal)
    clearTimeout(timeout)
    return outcome
  }

  async #attempt (event: OutboxEvent, signal: AbortSignal): Promise<AttemptOutcome> {
    const timestamp = String(Math.floor(Date.now() / 1000))
    try {
      const response = await this.#agent.request({
        origin: this.#url.origin,
        path: this.#url.pathname + this.#url.search,
        method: 'POST',
        headers: {
          'content-type': 'application/cloudevents+json',
          'user-agent': 'items-service',
          'webhook-id': event.id,
          'webhook-timestamp': timestamp,
          'webhook-signature': this.#signature(event, timestamp)
        },
        body: event.body,
        signal
      })
      const { statusCode: status } = response
      await response.body.dump({ limit: MAX_RESPONSE_BYTES }).catch(() => {})
      return status >= 200 && status < 300 ? { delivered: true, status } : { delivered: false, reason: `answered ${status}` }
    } catch (error) {
      // "TimeoutError: The operation was aborted due to timeout", "Error: connect ECONNREFUSED 127.0.0.1:4000", …
      return { delivered: false, reason: String(error) }
    }
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
