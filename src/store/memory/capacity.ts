import type { Item, User } from '../../domain.js'
import { type StoredItem, TEXT } from '../../serialized.js'
import { type CapacityBounds, type CapacityReading, floorsKept, type RegistrationPace, sharedPart, takeRegistration } from '../capacity.js'
import { RegistrationPacedError, StoreFullError } from '../store.js'

interface Account {
  /** Bytes kept beside its sessions. */
  bytes: number
  /** Its sessions' bytes: within the part of its floor kept for them. */
  sessions: number
  /**
   * What its floor holds beside its sessions' part (the floor less that part); 0 for an account the store never
   * admitted (a store used without its users).
   */
  readonly floorBesideSessions: number
}

// What V8 keeps of a string beside its characters (a header, rounded up).
const STRING_HEADER_BYTES = 16
// A stored item's object, its entry, its id and timestamps, its places in the map and in its five lists: an upper
// bound of what a store of a million items measures beside the strings of its fields and text (npm run bench:store).
const ITEM_OVERHEAD_BYTES = 512
// A user's object, id, role and time, its two map entries.
const USER_OVERHEAD_BYTES = 384
// An idempotency key's entry: its record's object and fields, its fingerprint and token, its places in two maps.
const KEY_OVERHEAD_BYTES = 384
// A session's entry, its object, its two sets and list, its places in two maps and in its user's sessions (the
// user's own set counted whole in each, an upper bound of one user's single session).
const SESSION_OVERHEAD_BYTES = 1792
// A refresh token's hash: its string, its place in a session's set or list, and in the map of hashes.
const TOKEN_HASH_BYTES = 192

const TWO_BYTE = /[^\u0000-\u00ff]/ // eslint-disable-line no-control-regex -- the Latin-1 range, which V8 keeps one byte a character

/** Bytes a string takes on V8's heap: a character one byte while all are Latin-1, two otherwise; and a header. */
export const stringBytes = (text: string): number => STRING_HEADER_BYTES + (TWO_BYTE.test(text) ? 2 * text.length : text.length)

const fieldBytes = (item: Item): number => stringBytes(item.name) + (item.description === null ? 0 : stringBytes(item.description))

/**
 * What a stored item keeps on the heap: its fields and its text. The text is one byte a character when both fields
 * are (the rest of it is ASCII, and JSON keeps Latin-1 as it is), so only the fields are scanned; when either is
 * not, all three are reckoned at two bytes a character, an upper bound. Reading a character of the text flattens
 * it: the serializer makes it as a tree of concatenated pieces, which V8 otherwise keeps as they are, at nearly
 * twice the bytes of a typical item (docs/performance.md).
 */
export function itemBytes (item: StoredItem): number {
  const { name, description } = item
  const text = item[TEXT]
  // Read for its effect, above.
  text.charCodeAt(0)
  const perCharacter = TWO_BYTE.test(name) || (description !== null && TWO_BYTE.test(description)) ? 2 : 1
  return ITEM_OVERHEAD_BYTES + 3 * STRING_HEADER_BYTES + perCharacter * (name.length + (description?.length ?? 0) + text.length)
}

export const userBytes = (user: User): number =>
  USER_OVERHEAD_BYTES + stringBytes(user.email) + stringBytes(user.emailKey) + stringBytes(user.passwordHash) + stringBytes(user.firstName) + stringBytes(user.lastName)

/** What an idempotency key keeps: its name (with its user's), and the fields of the item recorded under it, if any. */
export const keyBytes = (entryKey: string, item?: Item): number => KEY_OVERHEAD_BYTES + stringBytes(entryKey) + (item === undefined ? 0 : fieldBytes(item))

/** What a session keeps with `tokenHashes` refresh-token hashes remembered. */
export const sessionBytes = (tokenHashes: number): number => SESSION_OVERHEAD_BYTES + tokenHashes * TOKEN_HASH_BYTES

/**
 * The bytes each account makes the memory store keep, and the admission and refusals of src/store/capacity.ts. Every
 * part of the store that keeps something an account caused charges it here before it keeps it, and refunds it when
 * it lets it go, so that a refused charge leaves nothing changed.
 */
export class MemoryCapacity {
  readonly #bounds: CapacityBounds
  readonly #now: () => number
  readonly #floorsKeptBytes: number
  readonly #sharedBytes: number
  readonly #accounts = new Map<string, Account>()
  #heldBytes = 0
  #floorsBytes = 0
  #sharedUsedBytes = 0
  #admitted = 0
  #pace: RegistrationPace | undefined

  constructor (bounds: CapacityBounds, now: () => number = Date.now) {
    this.#bounds = bounds
    this.#now = now
    this.#floorsKeptBytes = floorsKept(bounds)
    this.#sharedBytes = sharedPart(bounds)
  }

  /**
   * Reserves a floor for a new account and charges it `bytes`: a StoreFullError when no floor is left, a
   * RegistrationPacedError when the pace on registrations holds it back.
   */
  admit (accountId: string, bytes: number): void {
    const { floorBytes, registrationRoomMs = 0 } = this.#bounds
    if (floorBytes > 0) {
      const floorsLeft = Math.floor((this.#floorsKeptBytes - this.#floorsBytes) / floorBytes)
      if (floorsLeft < 1) {
        throw new StoreFullError(`no floor of ${floorBytes} bytes is left: ${this.#admitted} accounts' floors take ${this.#floorsBytes} of ${this.#floorsKeptBytes}`, 'registration')
      }
      if (registrationRoomMs > 0 && Number.isFinite(floorsLeft)) {
        const pace = takeRegistration(this.#pace, floorsLeft, registrationRoomMs, this.#now())
        if (typeof pace === 'number') throw new RegistrationPacedError(pace)
        this.#pace = pace
      }
    }
    this.#accounts.set(accountId, { bytes: 0, sessions: 0, floorBesideSessions: Math.max(0, floorBytes - this.#bounds.sessionsBytes) })
    this.#floorsBytes += floorBytes
    this.#admitted += 1
    this.charge(accountId, bytes)
  }

  /**
   * Charges the account `bytes` (a refund when negative, never refused); a StoreFullError, and nothing charged, when
   * it would pass the account's ceiling, or need more of the shared part than is left.
   */
  charge (accountId: string, bytes: number): void {
    const known = this.#accounts.get(accountId)
    const account = known ?? { bytes: 0, sessions: 0, floorBesideSessions: 0 }
    const next = account.bytes + bytes
    const floor = account.floorBesideSessions
    const sharedUsed = this.#sharedUsedBytes + Math.max(0, next - floor) - Math.max(0, account.bytes - floor)
    if (bytes > 0) {
      if (next > this.#bounds.ceilingBytes) {
        throw new StoreFullError(`the account would keep ${next} bytes, past its ceiling of ${this.#bounds.ceilingBytes}`, 'account')
      }
      if (sharedUsed > this.#sharedUsedBytes && sharedUsed > this.#sharedBytes) {
        throw new StoreFullError(`the shared part is used up: ${this.#sharedUsedBytes} bytes of ${this.#sharedBytes}`, 'shared')
      }
    }
    account.bytes = next
    this.#heldBytes += bytes
    this.#sharedUsedBytes = sharedUsed
    this.#keep(accountId, account, known !== undefined)
  }

  refund (accountId: string, bytes: number): void {
    this.charge(accountId, -bytes)
  }

  /** What the account's sessions may still take of the part of its floor kept for them. */
  sessionsRoom (accountId: string): number {
    return this.#bounds.sessionsBytes - (this.#accounts.get(accountId)?.sessions ?? 0)
  }

  /**
   * Charges the account's sessions `bytes` (a refund when negative): never refused, since the session store first
   * ends the account's oldest sessions to keep them within `sessionsRoom`.
   */
  chargeSessions (accountId: string, bytes: number): void {
    const known = this.#accounts.get(accountId)
    const account = known ?? { bytes: 0, sessions: 0, floorBesideSessions: 0 }
    account.sessions += bytes
    this.#heldBytes += bytes
    this.#keep(accountId, account, known !== undefined)
  }

  // An account the store never admitted is kept only while it holds something.
  #keep (accountId: string, account: Account, known: boolean): void {
    if (!known) this.#accounts.set(accountId, account)
    else if (account.floorBesideSessions === 0 && account.bytes === 0 && account.sessions === 0) this.#accounts.delete(accountId)
  }

  reading (): CapacityReading {
    return {
      budgetBytes: this.#bounds.budgetBytes,
      heldBytes: this.#heldBytes,
      floorsKeptBytes: this.#floorsKeptBytes,
      floorsBytes: this.#floorsBytes,
      sharedUsedBytes: this.#sharedUsedBytes,
      accounts: this.#admitted
    }
  }
}
