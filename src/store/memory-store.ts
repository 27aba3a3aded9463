import { MemoryIdempotencyKeys, type MemoryIdempotencyKeyBounds } from './memory-idempotency-keys.js'
import { MemoryOutbox, type MemoryOutboxBounds } from './memory-outbox.js'
import { MemoryRateCounter } from './memory-rate-counter.js'
import { IDEMPOTENCY_KEY_DEFAULTS, isLive, MAX_PAIRS_PER_ROTATION, PENDING_DELIVERIES, REMEMBERED_REPLACED_TOKENS } from './rules.js'
import { storedItem } from '../serialized.js'
import { type Announcement, type IdempotencyClaim, IdTakenError, type Item, type ItemFilter, type ItemPage, type ItemStore, type RefreshOutcome, type Session, type SessionStore, type Store, type StoredItem, StoreFullError, type User, type UserStore } from './store.js'

class MemoryUserStore implements UserStore {
  readonly #maxUsers: number
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()

  constructor (maxUsers: number) {
    this.#maxUsers = maxUsers
  }

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    if (this.#byId.has(user.id)) throw new IdTakenError(`user ${user.id} exists already`)
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

interface ItemEntry {
  item: StoredItem
  readonly sequence: number
}

/** The items of one scope (the catalogue, or one contributor's), each list in creation order. */
interface ItemLists {
  readonly all: ItemEntry[]
  readonly active: ItemEntry[]
  readonly archived: ItemEntry[]
}

const emptyLists = (): ItemLists => ({ all: [], active: [], archived: [] })

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

// A new item goes last; one that changed status goes back to its place by creation.
function insert (list: ItemEntry[], entry: ItemEntry): void {
  if (list.length === 0 || list.at(-1)!.sequence < entry.sequence) list.push(entry)
  else list.splice(positionOf(list, entry.sequence), 0, entry)
}

const remove = (list: ItemEntry[], entry: ItemEntry): void => { list.splice(positionOf(list, entry.sequence), 1) }

class MemoryItemStore implements ItemStore {
  readonly #outbox: MemoryOutbox
  readonly #idempotencyKeys: MemoryIdempotencyKeys
  readonly #maxItems: number
  readonly #maxPerContributor: number
  readonly #byId = new Map<string, ItemEntry>()
  // A page is a slice of one list of the catalogue's or of a contributor's, so it costs O(pageSize) whatever its
  // number and filter. A contributor's lists (their length, the count they own) leave with their last item.
  readonly #catalogue = emptyLists()
  readonly #byContributor = new Map<string, ItemLists>()
  #nextSequence = 0

  constructor ({ maxItems, maxPerContributor }: { maxItems: number, maxPerContributor: number }, outbox: MemoryOutbox, idempotencyKeys: MemoryIdempotencyKeys) {
    this.#maxItems = maxItems
    this.#maxPerContributor = maxPerContributor
    this.#outbox = outbox
    this.#idempotencyKeys = idempotencyKeys
  }

  async add (item: Item, announce?: Announcement, claim?: IdempotencyClaim): Promise<StoredItem | undefined> {
    if (claim !== undefined) this.#idempotencyKeys.assertHeld(claim)
    if (this.#byId.has(item.id)) throw new IdTakenError(`item ${item.id} exists already`)
    const owned = this.#byContributor.get(item.contributorId)
    if (owned !== undefined && owned.all.length >= this.#maxPerContributor) return undefined
    if (this.#byId.size >= this.#maxItems) throw new StoreFullError(`the store holds ${this.#maxItems} items, as many as it may`)
    const entry = { item: storedItem(item), sequence: this.#nextSequence++ }
    this.#byId.set(item.id, entry)
    const contributorLists = owned ?? emptyLists()
    if (owned === undefined) this.#byContributor.set(item.contributorId, contributorLists)
    for (const lists of [this.#catalogue, contributorLists]) {
      lists.all.push(entry)
      lists[item.status].push(entry)
    }
    if (claim !== undefined) this.#idempotencyKeys.record(claim, entry.item)
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  async get (id: string): Promise<StoredItem | undefined> {
    return this.#byId.get(id)?.item
  }

  async page (offset: number, limit: number, { status, contributorId }: ItemFilter = {}): Promise<ItemPage> {
    const lists = contributorId === undefined ? this.#catalogue : this.#byContributor.get(contributorId) ?? emptyLists()
    const list = status === undefined ? lists.all : lists[status]
    return { items: list.slice(offset, offset + limit).map((entry) => entry.item), total: list.length }
  }

  async count (): Promise<number> {
    return this.#byId.size
  }

  async update (id: string, change: (current: StoredItem) => Item, announce?: Announcement): Promise<StoredItem | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    const previous = entry.item
    entry.item = storedItem(change(previous))
    if (entry.item.status !== previous.status) {
      // add listed the item under its contributor.
      for (const lists of [this.#catalogue, this.#byContributor.get(previous.contributorId)!]) {
        remove(lists[previous.status], entry)
        insert(lists[entry.item.status], entry)
      }
    }
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
  }

  async remove (id: string, confirm: (current: StoredItem) => void, announce?: Announcement): Promise<StoredItem | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    confirm(entry.item)
    this.#byId.delete(id)
    const { contributorId, status } = entry.item
    const contributorLists = this.#byContributor.get(contributorId)!
    for (const lists of [this.#catalogue, contributorLists]) {
      remove(lists.all, entry)
      remove(lists[status], entry)
    }
    if (contributorLists.all.length === 0) this.#byContributor.delete(contributorId)
    if (announce !== undefined) this.#outbox.record(announce(entry.item))
    return entry.item
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
  /** How long a create made under an idempotency key is remembered, and how many keys are kept. */
  idempotencyKeys?: Partial<MemoryIdempotencyKeyBounds>
}

// Per subscriber: PENDING_DELIVERIES deliveries, or 4 Mi characters of events (8 MB at most; about 8 000 events of a
// typical item, 200 of the largest).
export const MEMORY_OUTBOX_BOUNDS: MemoryOutboxBounds = { deliveries: PENDING_DELIVERIES, characters: 4 * 1024 * 1024 }

// Keys each rate limit keeps, those under it and, as many again, those over it (which new keys cannot push out):
// about 300 bytes each with an email in the key, so at most 30 MB per limit.
const KEYS_PER_RATE_LIMIT = 50_000

// Idempotency keys the store keeps, whoever holds them: 100 000 (each about 300 bytes beside its text), and 16 Mi
// characters of their text (keys, and the names and descriptions of their items, which an edited item holds twice),
// so at most about 64 MB.
const IDEMPOTENCY_KEYS = { total: 100_000, characters: 16 * 1024 * 1024, perUserCharacters: 256 * 1024 }

/** The store of one process, the default: everything is lost when it ends, as the spec says. */
export function createMemoryStore ({
  maxItemsPerContributor = Infinity,
  maxUsers = Infinity,
  maxItems = Infinity,
  pendingDeliveries = MEMORY_OUTBOX_BOUNDS,
  keysPerRateLimit = KEYS_PER_RATE_LIMIT,
  idempotencyKeys = {}
}: MemoryStoreOptions = {}): Store {
  const rateCounters = new Map<string, MemoryRateCounter>()
  const outbox = new MemoryOutbox(pendingDeliveries)
  const keys = new MemoryIdempotencyKeys({ ...IDEMPOTENCY_KEY_DEFAULTS, ...IDEMPOTENCY_KEYS, ...idempotencyKeys })
  let open = true
  return {
    users: new MemoryUserStore(maxUsers),
    sessions: new MemorySessionStore(),
    items: new MemoryItemStore({ maxItems, maxPerContributor: maxItemsPerContributor }, outbox, keys),
    idempotencyKeys: keys,
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
