// The outbox's part of the store's interface: the events writes record, and their deliveries to subscribers.

/**
 * A domain event, recorded in the store's outbox by the same atomic operation as the change that caused it: one
 * event per change that is stored, none for a change that is not.
 */
export interface OutboxEvent {
  /** Unique per event; the same on every delivery attempt. */
  readonly id: string
  readonly channel: string
  /** The event as its subscribers receive it, JSON. */
  readonly body: string
  /** The W3C traceparent of the request that caused the event, when it was traced: its deliveries join that trace. */
  readonly traceparent?: string
}

/** One event on its way to one subscriber. */
export interface Delivery {
  readonly event: OutboxEvent
  /** Which attempt this is, from 1. */
  readonly attempt: number
}

/** A delivery given up after its last attempt, kept until an operator delivers it again or a newer one pushes it out. */
export interface DeadLetter {
  readonly eventId: string
  readonly channel: string
  /** Attempts made, the last included. */
  readonly attempts: number
  /** What the last attempt met: the subscriber's status, or the error. */
  readonly failure: string
  /** When it was given up, in milliseconds since the epoch. */
  readonly failedAt: number
  /** Its place among the subscriber's dead letters, growing with each one: a page starts after one. */
  readonly position: number
  /** Bytes of the event's body (UTF-8). */
  readonly eventBytes: number
  /** The event's body, when the page was asked for them. */
  readonly body?: string
}

/** Which of a subscriber's dead letters to list. */
export interface DeadLetterPage {
  /** Only those after this position (0: from the oldest). */
  readonly after: number
  readonly limit: number
  /**
   * Bytes of bodies the page may carry, when it is to carry them: the page ends before the dead letter whose body
   * would pass this, unless that one is its first.
   */
  readonly bodyBytes?: number
}

export interface DeadLetterList {
  readonly deadLetters: DeadLetter[]
  /** Dead letters the subscriber holds, listed or not. */
  readonly total: number
  /** When more follow the page: the position to list them after (its last's). */
  readonly next?: number
}

export interface Taken {
  readonly deliveries: Delivery[]
  /** Deliveries to the subscriber that the outbox dropped since the last take, to stay within its bound. */
  readonly dropped: number
}

/**
 * The events the item writes record, fanned out into one delivery per subscriber of their channel, and the state of
 * each delivery. Any number of takers (instances of the service) share it: a delivery is leased to the one that
 * takes it, and handed out again when its lease ends before it is settled (its taker died mid-attempt).
 */
export interface Outbox {
  /** Whether what it holds outlives this process, for other instances to deliver (Redis), or ends with it (memory). */
  readonly durable: boolean
  /**
   * Keeps a delivery to `subscriber` of every event recorded from now on on one of `channels`. Idempotent: every
   * instance subscribes each configured subscriber at start.
   */
  subscribe (subscriber: string, channels: readonly string[]): Promise<void>
  /** Calls `listener` with every event that this process records, once its change is stored. */
  onRecorded (listener: (event: OutboxEvent) => void): void
  /**
   * Up to `limit` deliveries to `subscriber` due at `now`, oldest first: new events, retries whose time has come,
   * and deliveries whose lease ended unsettled. Each is leased to the caller until `now + leaseMs`.
   */
  take (subscriber: string, now: number, limit: number, leaseMs: number): Promise<Taken>
  /** Ends a delivery (delivered, or given up) when `retryAt` is undefined; otherwise schedules its next attempt. */
  settle (subscriber: string, delivery: Delivery, retryAt?: number): Promise<void>
  /** Deliveries to `subscriber` not yet ended. */
  pending (subscriber: string): Promise<number>
  /**
   * Ends a delivery whose last attempt failed (`failure` says how) and keeps it among the subscriber's dead letters,
   * at most DEAD_LETTERS, the oldest out first; resolves with how many were pushed out.
   */
  deadLetter (subscriber: string, delivery: Delivery, failure: string, now: number): Promise<number>
  /** A page of the subscriber's dead letters, oldest first, and how many it holds. */
  deadLetters (subscriber: string, page: DeadLetterPage): Promise<DeadLetterList>
  /**
   * Gives the dead letters of `eventIds` (all when undefined) back to delivery, due at `now`, their attempts counted
   * afresh; resolves with how many. Those for which the subscriber's pending deliveries have no room stay.
   */
  redeliver (subscriber: string, eventIds: readonly string[] | undefined, now: number): Promise<number>
}

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
