import { deliveryBytes, hasRoom, type OutboxBounds } from '../outbox.js'
import { DEAD_LETTER_BYTES, DEAD_LETTERS } from '../../domain/bounds.js'
import { deadLetterPage } from '../../domain/dead-letters.js'
import type { DeadLetter, DeadLetterList, DeadLetterPage, Delivery, Outbox, OutboxEvent, Taken } from '../store.js'

interface PendingDelivery {
  readonly event: OutboxEvent
  /** Its event's, against the bound (deliveryBytes). */
  readonly bytes: number
  attempt: number
  /** When it may be taken again: after its retry's wait, or when its lease ends. */
  dueAt: number
}

/** Deliveries waiting for a retry, soonest first: a binary min-heap on dueAt. */
class RetryHeap {
  readonly #heap: PendingDelivery[] = []

  get size (): number {
    return this.#heap.length
  }

  push (pending: PendingDelivery): void {
    const heap = this.#heap
    heap.push(pending)
    let index = heap.length - 1
    while (index > 0) {
      const parent = (index - 1) >> 1
      if (heap[parent]!.dueAt <= pending.dueAt) break
      heap[index] = heap[parent]!
      index = parent
    }
    heap[index] = pending
  }

  /** The soonest, when it is due by `now`. */
  popDue (now: number): PendingDelivery | undefined {
    const heap = this.#heap
    const soonest = heap[0]
    if (soonest === undefined || soonest.dueAt > now) return undefined
    const last = heap.pop()!
    if (heap.length > 0) {
      let index = 0
      for (;;) {
        const left = 2 * index + 1
        if (left >= heap.length) break
        const child = left + 1 < heap.length && heap[left + 1]!.dueAt < heap[left]!.dueAt ? left + 1 : left
        if (heap[child]!.dueAt >= last.dueAt) break
        heap[index] = heap[child]!
        index = child
      }
      heap[index] = last
    }
    return soonest
  }
}

interface KeptDeadLetter {
  /** As listed, without its body. */
  readonly listed: DeadLetter
  readonly event: OutboxEvent
}

interface SubscriberQueue {
  readonly channels: ReadonlySet<string>
  /** New deliveries, in the order their events were recorded. */
  readonly fresh: Map<string, PendingDelivery>
  /** Deliveries taken and not settled yet, in the order they were taken (with one lease length, of their lease's end). */
  readonly leased: Map<string, PendingDelivery>
  readonly retries: RetryHeap
  /** Deliveries given up, oldest first (by position), within the outbox's dead-letter bounds. */
  readonly deadLetters: Map<string, KeptDeadLetter>
  deadLetterBytes: number
  /** The position of the newest dead letter ever kept. */
  lastPosition: number
  /** Bytes of the pending deliveries' events (deliveryBytes). */
  bytes: number
  dropped: number
}

const pendingCount = (queue: SubscriberQueue): number => queue.fresh.size + queue.leased.size + queue.retries.size

/**
 * The outbox of one process: deliveries live as long as it does. Each subscriber keeps a bounded number of them;
 * at a bound a new event is dropped for that subscriber (and counted in its next take), and the deliveries already
 * waiting keep their place. A take costs O(log n) for each delivery it takes, whatever is pending.
 */
export class MemoryOutbox implements Outbox {
  readonly durable = false
  readonly #bounds: Required<OutboxBounds>
  readonly #queues = new Map<string, SubscriberQueue>()
  readonly #listeners: Array<(event: OutboxEvent) => void> = []

  constructor (bounds: OutboxBounds) {
    this.#bounds = { deadLetters: DEAD_LETTERS, deadLetterBytes: DEAD_LETTER_BYTES, ...bounds }
  }

  /** Keeps the event for every subscriber of its channel; called by the item store with the change it stores. */
  record (event: OutboxEvent): void {
    let bytes: number | undefined
    for (const queue of this.#queues.values()) {
      if (!queue.channels.has(event.channel)) continue
      bytes ??= deliveryBytes(event)
      if (!hasRoom(pendingCount(queue), queue.bytes, bytes, this.#bounds)) {
        queue.dropped += 1
        continue
      }
      queue.fresh.set(event.id, { event, bytes, attempt: 0, dueAt: 0 })
      queue.bytes += bytes
    }
    for (const listener of this.#listeners) listener(event)
  }

  async subscribe (subscriber: string, channels: readonly string[]): Promise<void> {
    if (this.#queues.has(subscriber)) return
    this.#queues.set(subscriber, { channels: new Set(channels), fresh: new Map(), leased: new Map(), retries: new RetryHeap(), deadLetters: new Map(), deadLetterBytes: 0, lastPosition: 0, bytes: 0, dropped: 0 })
  }

  /** Forgets the subscriber with whatever it had pending and dead-lettered: the events recorded from now on are not kept for it. */
  unsubscribe (subscriber: string): void {
    this.#queues.delete(subscriber)
  }

  onRecorded (listener: (event: OutboxEvent) => void): void {
    this.#listeners.push(listener)
  }

  async take (subscriber: string, now: number, limit: number, leaseMs: number): Promise<Taken> {
    const queue = this.#queues.get(subscriber)
    if (queue === undefined) return { deliveries: [], dropped: 0 }
    const { dropped } = queue
    queue.dropped = 0
    const due: PendingDelivery[] = []
    // Leases that ended unsettled first, then retries whose time has come, then new events.
    for (const pending of queue.leased.values()) {
      if (due.length === limit || pending.dueAt > now) break
      due.push(pending)
    }
    while (due.length < limit) {
      const retry = queue.retries.popDue(now)
      if (retry === undefined) break
      due.push(retry)
    }
    for (const pending of queue.fresh.values()) {
      if (due.length === limit) break
      queue.fresh.delete(pending.event.id)
      due.push(pending)
    }
    const deliveries = due.map((pending): Delivery => {
      pending.attempt += 1
      pending.dueAt = now + leaseMs
      queue.leased.delete(pending.event.id)
      queue.leased.set(pending.event.id, pending)
      return { event: pending.event, attempt: pending.attempt }
    })
    return { deliveries, dropped }
  }

  async settle (subscriber: string, delivery: Delivery, retryAt?: number): Promise<void> {
    const queue = this.#queues.get(subscriber)
    const pending = queue?.leased.get(delivery.event.id)
    if (queue === undefined || pending === undefined) return
    queue.leased.delete(delivery.event.id)
    if (retryAt === undefined) {
      queue.bytes -= pending.bytes
      return
    }
    pending.dueAt = retryAt
    queue.retries.push(pending)
  }

  async pending (subscriber: string): Promise<number> {
    const queue = this.#queues.get(subscriber)
    return queue === undefined ? 0 : pendingCount(queue)
  }

  async deadLetter (subscriber: string, delivery: Delivery, failure: string, now: number): Promise<number> {
    const queue = this.#queues.get(subscriber)
    if (queue === undefined || !queue.leased.has(delivery.event.id)) return 0
    await this.settle(subscriber, delivery)
    const { event, attempt } = delivery
    queue.lastPosition += 1
    const eventBytes = Buffer.byteLength(event.body)
    const listed = { eventId: event.id, channel: event.channel, attempts: attempt, failure, failedAt: now, position: queue.lastPosition, eventBytes }
    queue.deadLetters.set(event.id, { listed, event })
    queue.deadLetterBytes += eventBytes
    let pushedOut = 0
    for (const [eventId, { listed: oldest }] of queue.deadLetters) {
      if (queue.deadLetters.size <= 1 || (queue.deadLetters.size <= this.#bounds.deadLetters && queue.deadLetterBytes <= this.#bounds.deadLetterBytes)) break
      queue.deadLetters.delete(eventId)
      queue.deadLetterBytes -= oldest.eventBytes
      pushedOut += 1
    }
    return pushedOut
  }

  async deadLetters (subscriber: string, { after, limit, bodyBytes }: DeadLetterPage): Promise<DeadLetterList> {
    const kept = this.#queues.get(subscriber)?.deadLetters
    if (kept === undefined) return { deadLetters: [], total: 0 }
    // At most DEAD_LETTERS to pass over, in the order of their positions.
    const candidates = [...kept.values()].filter(({ listed }) => listed.position > after).slice(0, limit + 1)
    const { listed, more } = deadLetterPage(candidates.map(({ listed }) => listed.eventBytes), limit, bodyBytes)
    const deadLetters = candidates.slice(0, listed).map(({ listed, event }) => bodyBytes === undefined ? listed : { ...listed, body: event.body })
    return more ? { deadLetters, total: kept.size, next: deadLetters.at(-1)?.position ?? after } : { deadLetters, total: kept.size }
  }

  async redeliver (subscriber: string, eventIds: readonly string[] | undefined, now: number): Promise<number> {
    const queue = this.#queues.get(subscriber)
    if (queue === undefined) return 0
    let redelivered = 0
    for (const eventId of eventIds ?? [...queue.deadLetters.keys()]) {
      const deadLetter = queue.deadLetters.get(eventId)
      if (deadLetter === undefined) continue
      const { event, listed } = deadLetter
      const bytes = deliveryBytes(event)
      if (!hasRoom(pendingCount(queue), queue.bytes, bytes, this.#bounds)) break
      queue.deadLetters.delete(eventId)
      queue.deadLetterBytes -= listed.eventBytes
      queue.fresh.set(eventId, { event, bytes, attempt: 0, dueAt: now })
      queue.bytes += bytes
      redelivered += 1
    }
    return redelivered
  }
}
