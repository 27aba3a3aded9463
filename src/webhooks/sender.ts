import { Webhook } from 'standardwebhooks'
import { Agent } from 'undici'
import type { OutboxEvent } from '../store/store.js'
import type { Subscription } from './subscriptions.js'

export type AttemptOutcome =
  | { readonly delivered: true, readonly status: number }
  | { readonly delivered: false, readonly reason: string }

// What is read of a subscriber's answer at most: only its status matters.
const MAX_RESPONSE_BYTES = 64 * 1024

/**
 * POSTs events to subscribers as CloudEvents structured JSON, signed per Standard Webhooks 1.0, over a keep-alive
 * pool per subscriber origin of at most `connectionsPerOrigin` connections. Redirects are not followed: a 3xx is a
 * failed attempt, like any status but 2xx.
 */
export class WebhookSender {
  readonly #agent: Agent
  readonly #signers = new Map<string, Webhook>()

  /**
   * `timeoutMs` bounds each step of an attempt, with undici's own timers (an AbortSignal per request costs more
   * than the rest of the attempt's bookkeeping): the connection, the response's headers, each pause in its body.
   */
  constructor (options: { timeoutMs: number, connectionsPerOrigin: number }) {
    const { timeoutMs } = options
    this.#agent = new Agent({
      connections: options.connectionsPerOrigin,
      keepAliveTimeout: 30_000,
      connect: { timeout: timeoutMs },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs
    })
  }

  /** One attempt; never rejects: a timeout, a refused connection or a non-2xx status is a failed outcome. */
  async send (subscription: Subscription, event: OutboxEvent): Promise<AttemptOutcome> {
    const signer = this.#signers.get(subscription.id) ?? new Webhook(subscription.secret)
    this.#signers.set(subscription.id, signer)
    const url = new URL(subscription.url)
    const now = new Date()
    try {
      const response = await this.#agent.request({
        origin: url.origin,
        path: url.pathname + url.search,
        method: 'POST',
        headers: {
          'content-type': 'application/cloudevents+json',
          'user-agent': 'items-service',
          'webhook-id': event.id,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signer.sign(event.id, now, event.body)
        },
        body: event.body
      })
      await response.body.dump({ limit: MAX_RESPONSE_BYTES })
      const { statusCode: status } = response
      return status >= 200 && status < 300 ? { delivered: true, status } : { delivered: false, reason: `answered ${status}` }
    } catch (error) {
      // "HeadersTimeoutError: Headers Timeout Error", "Error: connect ECONNREFUSED 127.0.0.1:4000", …
      return { delivered: false, reason: String(error) }
    }
  }

  /** Waits for the attempts in progress, or ends them at once when `abort` is set. */
  async close (abort: boolean): Promise<void> {
    await (abort ? this.#agent.destroy() : this.#agent.close())
  }
}
