import { MemoryOutbox, type MemoryOutboxBounds } from './memory-outbox.js'
import { MemoryRateCounter } from './memory-rate-counter.js'
import { isLive, MAX_PAIRS_PER_ROTATION, PENDING_DELIVERIES, REMEMBERED_REPLACED_TOKENS } from './rules.js'
import { type Announcement, type Item, type ItemFilter, type ItemPage, type ItemStore, itemRecord, type RefreshOutcome, type Session, type SessionStore, type Store, StoreFullError, type User, type UserStore } from './store.js'

class MemoryUserStore implements UserStore {
  readonly #maxUsers: number
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()

  constructor (maxUsers: number) {
    this.#maxUsers = maxUsers
  }

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    if (this.#byId.size >= this.#maxUsers) throw new StoreFullError(`the store holds ${this.#maxUsers} users, as many as it may`)
    const stored = Object.freeze({ ...user })
    this.#byId.set(stored.id, stored)
    this.#byEmailKey.set(stored.emailKey, stored)
    return stored
  }

  async get (id: string): Promise<User | undefined> {
    return this.cached(id)
  }

  cached (id: string): User | undefined {
    return this.#byId.get(id)
  }

  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    return this.#byEmailKey.get(emailKey)
  }
}

interface SessionEntry {
  readonly session: Session
  /** Hashes of the refresh tokens valid now. */
  current: Set<string>
  /** Hashes the last rotation replaced, at `rotatedAt`: accepted again while the reuse leeway lasts. */
  previous: Set<string>
  rotatedAt: number
  /** Hashes replaced before that, newest last: presenting one is a replay. */
  replaced: string[]
}

class MemorySessionStore implements SessionStore {
  // In opening order; every session of a process has the same lifetime, so that is also the order they end in.
  readonly #byId = new Map<string, SessionEntry>()
  // Every refresh token hash a live session remembers: current, previous and replaced.
  readonly #byTokenHash = new Map<string, SessionEntry>()
  // Session ids by user, oldest first.
  readonly #byUser = new Map<string, Set<string>>()

  async open (session: Session, refreshTokenHash: string, maxPerUser: number): Promise<void> {
    const entry: SessionEntry = { session: Object.freeze({ ...session }), current: new Set([refreshTokenHash]), previous: new Set(), rotatedAt: 0, replaced: [] }
    this.#byId.set(session.id, entry)
    this.#byTokenHash.set(refreshTokenHash, entry)
    const ofUser = this.#byUser.get(session.userId) ?? new Set()
    this.#byUser.set(session.userId, ofUser.add(session.id))
    for (const oldest of ofUser) {
      if (ofUser.size <= maxPerUser) break
      await this.revoke(oldest)
    }
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined || isLive(entry.session, now)) return entry?.session
    this.#forget(entry)
    return undefined
  }

  // An ended session is left to `get`, which forgets it.
  cached (id: string, now: number): Session | undefined {
    const session = this.#byId.get(id)?.session
    return session !== undefined && isLive(session, now) ? session : undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number, reuseLeewayMs: number): Promise<RefreshOutcome> {
    const entry = this.#byTokenHash.get(presentedHash)
    if (entry === undefined) return { status: 'unknown' }
    if (!isLive(entry.session, now)) {
      this.#forget(entry)
      return { status: 'unknown' }
    }
    if (entry.current.has(presentedHash)) {
      entry.replaced.push(...entry.previous)
      for (const forgotten of entry.replaced.splice(0, entry.replaced.length - REMEMBERED_REPLACED_TOKENS)) this.#byTokenHash.delete(forgotten)
      entry.previous = entry.current
      entry.current = new Set([nextHash])
      entry.rotatedAt = now
    } else if (entry.previous.has(presentedHash) && now - entry.rotatedAt < reuseLeewayMs) {
      if (entry.current.size >= MAX_PAIRS_PER_ROTATION) return { status: 'unknown' }
      entry.current.add(nextHash)
    } else {
      this.#forget(entry)
      return { status: 'reused' }
    }
    this.#byTokenHash.set(nextHash, entry)
    return { status: 'rotated', session: entry.session }
  }

  async revoke (id: string): Promise<void> {
    const entry = this.#byId.get(id)
    if (entry !== undefined) this.#forget(entry)
  }

  async sweep (now: number, limit: number): Promise<number> {
    let forgotten = 0
    for (const entry of this.#byId.values()) {
      if (forgotten === limit || isLive(entry.session, now)) break
      this.#forget(entry)
      forgotten += 1
    }
    return forgotten
  }

  #forget (entry: SessionEntry): void {
    const { id, userId } = entry.session
    this.#byId.delete(id)
    for (const hash of [...entry.current, ...entry.previous, ...entry.replaced]) this.#byTokenHash.delete(hash)
    const ofUser = this.#byUser.get(userId)
    ofUser?.delete(id)
    if (ofUser?.size === 0) this.#byUser.delete(userId)
  }
}

// Frozen, with the one hidden class of itemRecord's literal.
const storedItem = (item: Item): Item => Object.freeze(itemRecord(item))

interface ItemEntry {
  item: Item
  readonly sequence: number
}

/** The name of the list a filter's pages are cut from: one for the whole catalogue, one per filter that has items. */
const listName = ({ status, contributorId }: ItemFilter): string => `${contributorId ?? ''} ${status ?? ''}`

/** The lists an item is in: the catalogue, its status's, its contributor's, and its contributor's of its status. */
const listsOf = ({ status, contributorId }: Item): string[] =>
  [listName({}), listName({ status }), listName({ contributorId }), listName({ status, contributorId })]

/** The position in `list` (ascending sequence order) of the entry with `sequence`, or where it would go: O(log n). */
function positionOf (list: readonly ItemEntry[], sequence: number): number {
  let low = 0
  let high = list.length
  while (low < high) {
    const middle = (low + high) >>> 1
    // low <= middle < high <= length, so the entry exists.
    if (list[middle]!.sequence < sequence) low = middle + 1
    else high = middle
  }
  return low
}

class MemoryItemStore implements ItemStore {
  readonly #outbox: MemoryOutbox
  readonly #maxItems: number
  readonly #maxPerContributor: number
  readonly #countByContributor = new Map<string, number>()
  readonly #byId = new Map<string, ItemEntry>()
  // Each in creation order, by listName; a page is a slice of one, so it costs O(pageSize) whatever its number and
  // filter. A list leaves with its last item.
  readonly #lists = new Map<string, ItemEntry[]>()
  #nextSequence = 0

  constructor ({ maxItems, maxPerContributor }: { maxItems: number, maxPerContributor: number }, outbox: MemoryOutbox) {
    this.#maxItems = maxItems
    this.#maxPerContributor = maxPerContributor
    this.#outbox = outbox
  }

  async add (item: Item, announce?: Announcement): Promise<Item | undefined> {
    const owned = this.#countByContributor.get(item.contributorId) ?? 0
    if (owned >= this.#maxPerContributor) return undefined
    if (this.#byId.size >= this.#maxItems) throw new StoreFullError(`the store holds ${this.#maxItems} items, as many as it may`)
    this.#countByContributor.set(item.contributorId, owned + 1)
    const entry = { item: storedItem(item), sequence: this.#nextSequence++ }
    this.#byId.set(item.id, entry)
    for (const name of listsOf(entry.item)) this.#insert(name, entry)
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  async get (id: string): Promise<Item | undefined> {
    return this.#byId.get(id)?.item
  }

  async page (offset: number, limit: number, filter: ItemFilter = {}): Promise<ItemPage> {
    const list = this.#lists.get(listName(filter)) ?? []
    return { items: list.slice(offset, offset + limit).map((entry) => entry.item), total: list.length }
  }

  async count (): Promise<number> {
    return this.#byId.size
  }

  async update (id: string, change: (current: Item) => Item, announce?: Announcement): Promise<Item | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    const previous = entry.item
    entry.item = storedItem(change(previous))
    if (entry.item.status !== previous.status) {
      for (const name of listsOf(previous)) this.#delete(name, entry)
      for (const name of listsOf(entry.item)) this.#insert(name, entry)
    }
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  async remove (id: string, confirm: (current: Item) => void, announce?: Announcement): Promise<Item | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    confirm(entry.item)
    this.#byId.delete(id)
    for (const name of listsOf(entry.item)) this.#delete(name, entry)
    // add counted the item, so its contributor has a count.
    const owned = this.#countByContributor.get(entry.item.contributorId)! - 1
    if (owned === 0) this.#countByContributor.delete(entry.item.contributorId)
    else this.#countByContributor.set(entry.item.contributorId, owned)
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  #insert (name: string, entry: ItemEntry): void {
    const list = this.#lists.get(name)
    if (list === undefined) this.#lists.set(name, [entry])
    // A new item goes last; one that changed status goes back to its place by creation.
    else if (list.at(-1)!.sequence < entry.sequence) list.push(entry)
    else list.splice(positionOf(list, entry.sequence), 0, entry)
  }

  #delete (name: string, entry: ItemEntry): void {
    // The entry is in every list of its item.
    const list = this.#lists.get(name)!
    if (list.length === 1) this.#lists.delete(name)
    else list.splice(positionOf(list, entry.sequence), 1)
  }
}

export interface MemoryStoreOptions {
  /** Items one contributor may own at once; unbounded when left out. */
  maxItemsPerContributor?: number
  /** Users and items the store holds at most, whoever adds them; unbounded when left out. */
  maxUsers?: number
  maxItems?: number
  /** What the outbox keeps per subscriber; past either bound, new events are dropped for it. */
  pendingDeliveries?: MemoryOutboxBounds
  /** Client keys each rate limit keeps under its limit, and as many again over it. */
  keysPerRateLimit?: number
}

// Per subscriber: PENDING_DELIVERIES deliveries, or 4 Mi characters of events (8 MB at most; about 8 000 events of a
// typical item, 200 of the largest).
export const MEMORY_OUTBOX_BOUNDS: MemoryOutboxBounds = { deliveries: PENDING_DELIVERIES, characters: 4 * 1024 * 1024 }

// Keys each rate limit keeps, those under it and, as many again, those over it (which new keys cannot push out):
// about 300 bytes each with an email in the key, so at most 30 MB per limit.
const KEYS_PER_RATE_LIMIT = 50_000

/** The store of one process, the default: everything is lost when it ends, as the spec says. */
export function createMemoryStore ({
  maxItemsPerContributor = Infinity,
  maxUsers = Infinity,
  maxItems = Infinity,
  pendingDeliveries = MEMORY_OUTBOX_BOUNDS,
  keysPerRateLimit = KEYS_PER_RATE_LIMIT
}: MemoryStoreOptions = {}): Store {
  const rateCounters = new Map<string, MemoryRateCounter>()
  const outbox = new MemoryOutbox(pendingDeliveries)
  let open = true
  return {
    users: new MemoryUserStore(maxUsers),
    sessions: new MemorySessionStore(),
    items: new MemoryItemStore({ maxItems, maxPerContributor: maxItemsPerContributor }, outbox),
    outbox,
    rateCounter: (name) => {
      const counter = rateCounters.get(name) ?? new MemoryRateCounter(keysPerRateLimit)
      rateCounters.set(name, counter)
      return counter
    },
    available: () => open,
    now: () => Date.now(),
    close: async () => { open = false }
  }
}
