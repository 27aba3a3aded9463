import type { Item, ItemPage, ItemStore, RefreshOutcome, Session, SessionStore, Store, User, UserStore } from './store.js'

class MemoryUserStore implements UserStore {
  readonly #byId = new Map<string, User>()
  readonly #byEmailKey = new Map<string, User>()

  async add (user: User): Promise<User | undefined> {
    if (this.#byEmailKey.has(user.emailKey)) return undefined
    const stored = Object.freeze({ ...user })
    this.#byId.set(stored.id, stored)
    this.#byEmailKey.set(stored.emailKey, stored)
    return stored
  }

  async get (id: string): Promise<User | undefined> {
    return this.#byId.get(id)
  }

  async findByEmailKey (emailKey: string): Promise<User | undefined> {
    return this.#byEmailKey.get(emailKey)
  }
}

class MemorySessionStore implements SessionStore {
  readonly #byId = new Map<string, Session>()
  readonly #byRefreshTokenHash = new Map<string, Session>()
  // Refresh token hashes that were rotated away, kept until their session ends so that a replay can be detected.
  readonly #retiredHashes = new Map<string, string>()
  readonly #retiredHashesBySession = new Map<string, string[]>()

  async open (session: Session): Promise<void> {
    const stored = Object.freeze({ ...session })
    this.#byId.set(stored.id, stored)
    this.#byRefreshTokenHash.set(stored.refreshTokenHash, stored)
  }

  async get (id: string, now: number): Promise<Session | undefined> {
    const session = this.#byId.get(id)
    if (session === undefined || session.expiresAt > now) return session
    this.#forget(session)
    return undefined
  }

  async rotateRefreshToken (presentedHash: string, nextHash: string, now: number): Promise<RefreshOutcome> {
    const session = this.#byRefreshTokenHash.get(presentedHash)
    if (session === undefined) {
      const reusedSessionId = this.#retiredHashes.get(presentedHash)
      if (reusedSessionId === undefined) return { status: 'unknown' }
      await this.revoke(reusedSessionId)
      return { status: 'reused' }
    }
    if (session.expiresAt <= now) {
      this.#forget(session)
      return { status: 'unknown' }
    }
    const rotated = Object.freeze({ ...session, refreshTokenHash: nextHash })
    this.#byRefreshTokenHash.delete(presentedHash)
    this.#byRefreshTokenHash.set(nextHash, rotated)
    this.#byId.set(rotated.id, rotated)
    this.#retiredHashes.set(presentedHash, session.id)
    const retired = this.#retiredHashesBySession.get(session.id) ?? []
    retired.push(presentedHash)
    this.#retiredHashesBySession.set(session.id, retired)
    return { status: 'rotated', session: rotated }
  }

  async revoke (id: string): Promise<void> {
    const session = this.#byId.get(id)
    if (session !== undefined) this.#forget(session)
  }

  #forget (session: Session): void {
    this.#byId.delete(session.id)
    this.#byRefreshTokenHash.delete(session.refreshTokenHash)
    for (const hash of this.#retiredHashesBySession.get(session.id) ?? []) this.#retiredHashes.delete(hash)
    this.#retiredHashesBySession.delete(session.id)
  }
}

interface ItemEntry {
  item: Item
  readonly sequence: number
}

class MemoryItemStore implements ItemStore {
  readonly #byId = new Map<string, ItemEntry>()
  // Creation order; a page is a slice of it, so listing costs O(pageSize) whatever the page number.
  readonly #inOrder: ItemEntry[] = []
  #nextSequence = 0

  async add (item: Item): Promise<Item> {
    const entry = { item: Object.freeze({ ...item }), sequence: this.#nextSequence++ }
    this.#byId.set(item.id, entry)
    this.#inOrder.push(entry)
    return entry.item
  }

  async get (id: string): Promise<Item | undefined> {
    return this.#byId.get(id)?.item
  }

  async page (offset: number, limit: number): Promise<ItemPage> {
    return {
      items: this.#inOrder.slice(offset, offset + limit).map((entry) => entry.item),
      total: this.#inOrder.length
    }
  }

  async update (id: string, change: (current: Item) => Item): Promise<Item | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    entry.item = Object.freeze({ ...change(entry.item) })
    return entry.item
  }

  async remove (id: string, confirm: (current: Item) => void): Promise<Item | undefined> {
    const entry = this.#byId.get(id)
    if (entry === undefined) return undefined
    confirm(entry.item)
    this.#byId.delete(id)
    this.#inOrder.splice(this.#positionOf(entry.sequence), 1)
    return entry.item
  }

  // Entries are in ascending sequence order, so a binary search finds one in O(log n).
  #positionOf (sequence: number): number {
    let low = 0
    let high = this.#inOrder.length - 1
    while (low < high) {
      const middle = (low + high) >>> 1
      // low <= middle < high < length, so the entry exists.
      if (this.#inOrder[middle]!.sequence < sequence) low = middle + 1
      else high = middle
    }
    return low
  }
}

export function createMemoryStore (): Store {
  return {
    users: new MemoryUserStore(),
    sessions: new MemorySessionStore(),
    items: new MemoryItemStore()
  }
}
