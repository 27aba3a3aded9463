import type { OutboxEvent } from './store.js'

/** What an outbox keeps for each subscriber. */
export interface OutboxBounds {
  /** Deliveries each subscriber keeps pending at most. */
  readonly deliveries: number
  /** Bytes of their events (deliveryBytes) each subscriber keeps pending at most. */
  readonly deliveryBytes: number
  /** Dead letters each subscriber keeps at most, and bytes of their bodies: DEAD_LETTERS and DEAD_LETTER_BYTES when left out. */
  readonly deadLetters?: number
  readonly deadLetterBytes?: number
}

/**
 * What a pending delivery's event counts against its subscriber's bound in bytes: its channel, a space and its body
 * in UTF-8, as the Redis outbox keeps it (`#stored` in outbox.ts's scripts), so that one bound means one thing on
 * every store, whatever characters make the event.
 */
export const deliveryBytes = ({ channel, body }: Pick<OutboxEvent, 'channel' | 'body'>): number =>
  Buffer.byteLength(channel) + 1 + Buffer.byteLength(body)

/**
 * Whether a subscriber with `deliveries` pending, of `pendingBytes`, has room for one more of `bytes` (deliveryBytes):
 * at either bound a new event is dropped for it, and a dead letter stays one. (Redis decides it in its scripts, by
 * outbox.ts's PENDING_ROOM.)
 */
export const hasRoom = (deliveries: number, pendingBytes: number, bytes: number, bounds: OutboxBounds): boolean =>
  deliveries < bounds.deliveries && pendingBytes + bytes <= bounds.deliveryBytes
