import type { Redis } from 'ioredis'
import { FifoMap } from 'toad-cache'
import type { Session } from '../../domain.js'

/**
 * Sessions this instance has read, kept only while Redis tells it of every change to them: client-side caching,
 * with CLIENT TRACKING in broadcast mode over the session keys, the invalidations arriving on a connection of
 * their own. Authentication reads the caller's session on every request, and a hit spares it a round trip. A
 * logout, a revocation or an expiry anywhere reaches every instance's cache as Redis makes the change (within a
 * fraction of a millisecond on one host, before a client can send its next request). While either connection is
 * down the cache is empty and off, and a read that an invalidation overtook is not kept.
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

  /** A connection dropped: Redis tracks nothing for this instance until tracking is turned on again. */
  lost (): void {
    this.#losses += 1
    this.#byId.clear()
  }
}

/**
 * Keeps `sessions` told of every change Redis makes to a key under `keyPrefix`. Invalidations arrive on a second
 * connection, in RESP2, where Redis sends them as messages on `__redis__:invalidate`; each time either connection
 * is (re)established, tracking is turned on again on the first with the second as its target. Redis 6 or later.
 * Resolves to the second connection, for the store to close.
 */
export async function trackSessions (redis: Redis, keyPrefix: string, sessions: TrackedSessions): Promise<Redis> {
  const invalidations = redis.duplicate({ protocol: 2, autoResubscribe: false, lazyConnect: true })
  // The client id of the invalidation connection once it listens; until then Redis refuses to track for it.
  let target = 'none'
  // Tracking belongs to a connection: one made again starts without it, and to change its target it is turned
  // off first. Failures need nothing: the connection that failed is made again, and its 'ready' comes back here.
  const track = async (): Promise<void> => {
    const lossesBefore = sessions.losses
    await redis.client('TRACKING', 'OFF')
    await redis.client('TRACKING', 'ON', 'REDIRECT', target, 'BCAST', 'PREFIX', keyPrefix)
    sessions.tracked(lossesBefore)
  }
  const ignore = (): void => {}
  let established = Promise.resolve()
  invalidations.on('ready', () => {
    established = (async () => {
      const id = await invalidations.client('ID')
      await invalidations.subscribe('__redis__:invalidate')
      target = String(id)
      await track()
    })().catch(ignore)
  })
  invalidations.on('messageBuffer', (_channel: Buffer, keys: unknown) => {
    sessions.invalidate(Array.isArray(keys) ? keys.map((key) => String(key).slice(keyPrefix.length)) : undefined)
  })
  invalidations.on('close', () => {
    target = 'none'
    sessions.lost()
  })
  // The main connection reports outages.
  invalidations.on('error', ignore)
  redis.on('ready', () => { track().catch(ignore) })
  redis.on('close', () => { sessions.lost() })
  // Serving starts with tracking on, unless its connection fails; then it starts when that connection is made.
  await invalidations.connect().catch(ignore)
  await established
  return invalidations
}
