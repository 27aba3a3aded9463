import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { FifoMap } from 'toad-cache'
import type { Session } from '../../domain/index.js'

/** How often an instance proves both its connections alive, and how long it trusts them without a proof. */
export interface Heartbeat {
  readonly intervalMs: number
  readonly deadlineMs: number
}

// A session ended anywhere is refused everywhere within the deadline and an interval (docs/redis.md), whatever
// the network does; the deadline is past the command timeout, so that a slow reply is not taken for silence.
export const HEARTBEAT: Heartbeat = { intervalMs: 250, deadlineMs: 1500 }
const HEARTBEAT_KEPT_MS = 60_000
// The channel Redis sends a tracked key's invalidations on, in RESP2.
const INVALIDATIONS = '__redis__:invalidate'

/**
 * Where a connection is (a primary's change is told by it, and tracking needs both connections on one server); a
 * connection whose socket is gone is nowhere, "undefined:undefined".
 */
export const serverOf = (redis: Redis): string => `${String(redis.stream?.remoteAddress)}:${String(redis.stream?.remotePort)}`

/**
 * Sessions this instance has read, kept only while Redis tells it of every change to them: client-side caching,
 * with CLIENT TRACKING in broadcast mode over the session keys, the invalidations arriving on a connection of
 * their own. Authentication reads the caller's session on every request, and a hit spares it a round trip. A
 * logout, a revocation or an expiry anywhere reaches every instance's cache as Redis makes the change. While either
 * connection is down, or has not been proven alive within the heartbeat's deadline, the cache is empty and off,
 * and a read that an invalidation overtook is not kept.
 */
export class TrackedSessions {
  // The oldest out first.
  readonly #byId: FifoMap<Session>
  #invalidations = 0
  #losses = 0
  // The losses counted when tracking was last turned on: tracking holds while no connection dropped since.
  #trackedSince = -1

  constructor (maxCached: number) {
    this.#byId = new FifoMap(maxCached)
  }

  /** Moves on with every invalidation; NaN while Redis does not track the sessions, so that no read then is kept. */
  get epoch (): number {
    return this.#trackedSince === this.#losses ? this.#invalidations : Number.NaN
  }

  get losses (): number {
    return this.#losses
  }

  get (id: string): Session | undefined {
    return this.#byId.get(id)
  }

  /** Keeps a session read when the epoch was `readAt`, unless the epoch moved while the read was on its way. */
  keep (session: Session, readAt: number): void {
    if (readAt === this.epoch) this.#byId.set(session.id, session)
  }

  /** Forgets the given sessions, or every session (undefined: Redis flushed its keys). */
  invalidate (ids: string[] | undefined): void {
    this.#invalidations += 1
    if (ids === undefined) this.#byId.clear()
    else this.#byId.deleteMany(ids)
  }

  /** Tracking was turned on after `losses` read `lossesBefore`; it holds unless a connection dropped since. */
  tracked (lossesBefore: number): void {
    this.#trackedSince = lossesBefore
  }

  /** A connection dropped, or went silent: nothing is trusted until tracking is turned on again. */
  lost (): void {
    this.#losses += 1
    this.#byId.clear()
  }
}

export interface TrackingOptions {
  /** The prefix of the session keys, which Redis tracks for the instance. */
  readonly keyPrefix: string
  /** The family of the heartbeat keys, under `keyPrefix`. */
  readonly heartbeatPrefix: string
  readonly heartbeat: Heartbeat
  readonly logger: { warn: (details: object, message: string) => void }
  /**
   * A channel heard on the same connection (the sandboxes' journals'), and what to tell of each message on it (its
   * text; the empty text when one may have been missed, the connection having been made again).
   */
  readonly watched: { readonly channel: string, readonly changed: (message: string) => void }
}

/**
 * Keeps `sessions` told of every change Redis makes to a key under the prefix, and proves it: invalidations arrive
 * on a second connection, in RESP2, where Redis sends them as messages on `__redis__:invalidate`; each time either
 * connection is (re)established, tracking is turned on again on the first with the second as its target. Redis 6
 * or later.
 *
 * A connection that goes silent without closing (a balancer's or a NAT's idle timeout, a cable pulled) is not
 * taken for alive: every interval the instance writes a key of its own under the prefix, through the main
 * connection, and hears of it on the second. Both connections, and tracking between them, are proven when its
 * invalidation arrives, and the main one when its reply does. Past the deadline without either proof, the
 * instance forgets every session it kept and makes the silent connection again; meanwhile it reads from Redis.
 * The second connection also hears `watched.channel`, proven alive with it.
 * Resolves to the second connection, for the store to close; `proven`, whether the main connection has answered
 * within the deadline (a stalled server keeps its connection open, and the client calls it ready); `stop` ends the
 * heartbeat.
 */
export async function trackSessions (redis: Redis, sessions: TrackedSessions, options: TrackingOptions): Promise<{ invalidations: Redis, proven: () => boolean, stop: () => void }> {
  const { keyPrefix, heartbeatPrefix, heartbeat, logger, watched } = options
  const invalidations = redis.duplicate({ protocol: 2, autoResubscribe: false, lazyConnect: true })
  const heartbeatKey = heartbeatPrefix + randomUUID()
  // The client id of the invalidation connection once it listens; until then Redis refuses to track for it.
  let target = 'none'
  // When each was last proven (performance.now()): the sending of the latest heartbeat heard of, the reply.
  let heardAt = -Infinity
  // The main connection has just answered the start's commands.
  let answeredAt = performance.now()
  // Found silent, until it is made again: its socket may stay open a while after.
  let mainSilent = false
  // The heartbeats sent and not yet heard of, oldest first: each invalidation is the oldest's.
  const unheard: number[] = []
  const maxUnheard = Math.ceil(heartbeat.deadlineMs / heartbeat.intervalMs) + 1
  // Tracking belongs to a connection: one made again starts without it, and to change its target it is turned
  // off first. Failures need nothing: the connection that failed is made again, and its 'ready' comes back here.
  const track = async (): Promise<void> => {
    const lossesBefore = sessions.losses
    // After a failover one connection may reach the new primary before the other: an id is the server's own, and
    // on another server names another client. The second's 'ready' tracks again.
    if (serverOf(redis) !== serverOf(invalidations)) return
    await redis.client('TRACKING', 'OFF')
    await redis.client('TRACKING', 'ON', 'REDIRECT', target, 'BCAST', 'PREFIX', keyPrefix)
    unheard.length = 0
    heardAt = answeredAt = performance.now()
    sessions.tracked(lossesBefore)
    watched.changed('')
  }
  const ignore = (): void => {}
  let established = Promise.resolve()
  invalidations.on('ready', () => {
    heardAt = performance.now()
    established = (async () => {
      const id = await invalidations.client('ID')
      await invalidations.subscribe(INVALIDATIONS, watched.channel)
      target = String(id)
      await track()
    })().catch(ignore)
  })
  invalidations.on('messageBuffer', (channel: Buffer, keys: unknown) => {
    if (channel.toString() !== INVALIDATIONS) {
      watched.changed(String(keys))
      return
    }
    if (!Array.isArray(keys)) {
      sessions.invalidate(undefined)
      return
    }
    const ids: string[] = []
    for (const key of keys) {
      const name = String(key)
      // One the instance did not send (or sent before tracking was turned on again) proves nothing.
      if (name === heartbeatKey) heardAt = Math.max(heardAt, ...unheard.splice(0, 1))
      else if (!name.startsWith(heartbeatPrefix)) ids.push(name.slice(keyPrefix.length))
    }
    if (ids.length > 0) sessions.invalidate(ids)
  })
  invalidations.on('close', () => {
    target = 'none'
    sessions.lost()
  })
  // The main connection reports outages.
  invalidations.on('error', ignore)
  // Given up mid-way as the main connection may be (connection.ts), and made again the same way, until stopped.
  let stopped = false
  let connectingAgain: NodeJS.Timeout | undefined
  invalidations.on('end', () => {
    if (stopped) return
    connectingAgain = setTimeout(() => { invalidations.connect().catch(ignore) }, heartbeat.intervalMs).unref()
  })
  // A connection just made has answered: its silence is counted from now, not from before the outage (else a
  // recovered instance would make it again at once); tracking, made again below, is proven by the heartbeats.
  redis.on('ready', () => {
    mainSilent = false
    heardAt = answeredAt = performance.now()
    track().catch(ignore)
  })
  redis.on('close', () => { sessions.lost() })

  const silent = (connection: Redis, since: number, which: string, now: number): boolean => {
    if (connection.status !== 'ready' || now - since <= heartbeat.deadlineMs) return false
    logger.warn({ connection: which, silentMs: Math.round(now - since) }, `the Redis ${which} connection has not been heard of within the deadline; connecting again, and reading sessions from Redis meanwhile`)
    if (connection === redis) mainSilent = true
    sessions.lost()
    connection.disconnect(true)
    return true
  }
  const beat = (): void => {
    const now = performance.now()
    if (silent(redis, answeredAt, 'main', now) || silent(invalidations, heardAt, 'invalidation', now)) {
      heardAt = answeredAt = now
      return
    }
    if (redis.status !== 'ready') return
    unheard.push(now)
    // Bounded while the second connection cannot be made again: nothing older than the deadline can matter.
    unheard.splice(0, unheard.length - maxUnheard)
    // Kept past any silence the instance lives through without making its connections again: its expiry, which
    // Redis also tells of, is never taken for a heartbeat heard.
    // A refusal is an answer too (a primary short of replicas under min-replicas-to-write says NOREPLICAS): the
    // connection is alive, only the invalidation, which proves the other, does not come.
    const answered = (): void => { answeredAt = Math.max(answeredAt, now) }
    redis.set(heartbeatKey, '', 'PX', HEARTBEAT_KEPT_MS).then(answered, (error: unknown) => { if (error instanceof Error && error.name === 'ReplyError') answered() })
  }
  const beats = setInterval(beat, heartbeat.intervalMs).unref()
  // Serving starts with tracking on, unless its connection fails; then it starts when that connection is made.
  await invalidations.connect().catch(ignore)
  await established
  return {
    invalidations,
    proven: () => !mainSilent && performance.now() - answeredAt <= heartbeat.deadlineMs,
    stop: () => {
      stopped = true
      clearTimeout(connectingAgain)
      clearInterval(beats)
    }
  }
}
