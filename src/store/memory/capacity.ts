import type { Item, User } from '../../domain/index.js'
import { ITEM_REQUEST_PROPERTIES } from '../../domain/records.js'
import { type StoredItem, TEXT } from '../../domain/serialized.js'
import { admission, type CapacityBounds, type CapacityReading, chargeRefused, floorsKept, type Ledger, type PaceReading, type RegistrationPace, registrationWait, sharedPart, sharedUsedAfter } from '../capacity.js'
import { RegistrationPacedError, StoreFullError } from '../store.js'

interface Account {
  /** Bytes kept beside its sessions. */
  bytes: number
  /** Its sessions' bytes: within the part of its floor kept for them. */
  sessions: number
  /** Its floor, its sessions' part included; 0 without floors. */
  readonly floor: number
  /** Admitted (counted among the accounts) until it is released; never, in a store used without its users. */
  readonly admitted: boolean
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

// An account the store never admitted: no floor of its own.
const NOT_ADMITTED: Readonly<Account> = { bytes: 0, sessions: 0, floor: 0, admitted: false }

const TWO_BYTE = /[^\u0000-\u00ff]/ // eslint-disable-line no-control-regex -- the Latin-1 range, which V8 keeps one byte a character

/** Bytes a string takes on V8's heap: a character one byte while all are Latin-1, two otherwise; and a header. */
export const stringBytes = (text: string): number => STRING_HEADER_BYTES + (TWO_BYTE.test(text) ? 2 * text.length : text.length)

// The strings a create or an edit wrote into an item: the values of its request properties that are strings.
function writtenStringBytes (item: Item): number {
  const fields: Readonly<Record<string, unknown>> = item
  let bytes = 0
  for (const name of ITEM_REQUEST_PROPERTIES) {
    const value = fields[name]
    if (typeof value === 'string') bytes += stringBytes(value)
  }
  return bytes
}

/**
 * What a stored item keeps on the heap: the strings written into it and its text. The text is one byte a character
 * when every string written is (the rest of it is ASCII, and JSON keeps Latin-1 as it is), so only those are
 * scanned; when any is not, all are reckoned at two bytes a character, an upper bound. Reading a character of the
 * text flattens it: the serializer makes it as a tree of concatenated pieces, which V8 otherwise keeps as they are,
 * at nearly twice the bytes of a typical item (docs/performance.md).
 */
export function itemBytes (item: StoredItem): number {
  const fields: Readonly<Record<string, unknown>> = item
  const text = item[TEXT]
  // Read for its effect, above.
  text.charCodeAt(0)
  let strings = 1
  let characters = text.length
  let perCharacter = 1
  for (const name of ITEM_REQUEST_PROPERTIES) {
    const value = fields[name]
    if (typeof value !== 'string') continue
    strings += 1
    characters += value.length
    if (perCharacter === 1 && TWO_BYTE.test(value)) perCharacter = 2
  }
  return ITEM_OVERHEAD_BYTES + strings * STRING_HEADER_BYTES + perCharacter * characters
}

export const userBytes = (user: User): number =>
  USER_OVERHEAD_BYTES + stringBytes(user.email) + stringBytes(user.emailKey) + stringBytes(user.passwordHash) + stringBytes(user.firstName) + stringBytes(user.lastName)

/** What an idempotency key keeps: its name (with its user's), and the fields of the item recorded under it, if any. */
export const keyBytes = (entryKey: string, item?: Item): number => KEY_OVERHEAD_BYTES + stringBytes(entryKey) + (item === undefined ? 0 : writtenStringBytes(item))

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
  readonly #accounts = new Map<string, Account>()
  #heldBytes = 0
  #floorsBytes = 0
  // The bounds a charge reads, and what the shared part holds, kept up to date.
  readonly #ledger: { -readonly [Field in keyof Ledger]: Ledger[Field] }
  #admitted = 0
  #driftBytes = 0
  #pace: RegistrationPace | undefined

  constructor (bounds: CapacityBounds, now: () => number = Date.now) {
    this.#bounds = bounds
    this.#now = now
    this.#floorsKeptBytes = floorsKept(bounds)
    this.#ledger = { ceilingBytes: bounds.ceilingBytes, sessionsBytes: bounds.sessionsBytes, sharedPartBytes: sharedPart(bounds), sharedUsedBytes: 0 }
  }

  /**
   * Reserves a floor for a new account and charges it `bytes`: a StoreFullError when no floor is left, a
   * RegistrationPacedError when the pace on registrations holds it back.
   */
  admit (accountId: string, bytes: number): void {
    const admitted = admission(this.#paceReading(), this.#now())
    if (admitted === 'registration') {
      throw new StoreFullError(`no floor of ${this.#bounds.floorBytes} bytes is left: ${this.#admitted} accounts' floors take ${this.#floorsBytes} of ${this.#floorsKeptBytes}`, 'registration')
    }
    if (typeof admitted === 'number') throw new RegistrationPacedError(admitted)
    const account = { bytes: 0, sessions: 0, floor: this.#bounds.floorBytes, admitted: true }
    // All or nothing: an account whose charge is refused is not admitted, and takes nothing from the pace.
    const refused = this.#refusalOf(account, bytes)
    if (refused !== undefined) throw refused
    if (admitted.pace !== undefined) this.#pace = admitted.pace
    this.#accounts.set(accountId, account)
    this.#floorsBytes += account.floor
    this.#admitted += 1
    this.hold(accountId, bytes)
  }

  /** How long (ms) the pace on registrations holds the next one back: 0 when it would let it through. Changes nothing. */
  registrationWait (): number {
    return registrationWait(this.#paceReading(), this.#now())
  }

  #paceReading (): PaceReading {
    const { floorBytes, registrationRoomMs = 0 } = this.#bounds
    return { floorBytes, floorsBytes: this.#floorsBytes, floorsKeptBytes: this.#floorsKeptBytes, roomMs: registrationRoomMs, pace: this.#pace }
  }

  /**
   * Why charging the account `bytes` would be refused (it would pass the account's ceiling, or need more of the
   * shared part than is left), or undefined when it would not be; nothing is charged.
   */
  refusal (accountId: string, bytes: number): StoreFullError | undefined {
    return this.#refusalOf(this.#accounts.get(accountId) ?? NOT_ADMITTED, bytes)
  }

  #refusalOf (account: Account, bytes: number): StoreFullError | undefined {
    switch (chargeRefused(this.#ledger, account, bytes)) {
      case undefined: return undefined
      case 'account': return new StoreFullError(`the account would keep ${account.bytes + bytes} bytes, past its ceiling of ${this.#bounds.ceilingBytes}`, 'account')
      case 'shared': return new StoreFullError(`the shared part is used up: ${this.#ledger.sharedUsedBytes} bytes of ${this.#ledger.sharedPartBytes}`, 'shared')
    }
  }

  /**
   * Charges the account `bytes` (a refund when negative, never refused); a StoreFullError, and nothing charged, when
   * `refusal` says why not.
   */
  charge (accountId: string, bytes: number): void {
    const refused = this.refusal(accountId, bytes)
    if (refused !== undefined) throw refused
    this.hold(accountId, bytes)
  }

  /**
   * Charges the account `bytes` whatever its room: an idempotency key's claim, which lasts only while its request
   * runs (so the write limits and its lease bound it), and whose create then makes room for the item and its record,
   * all or nothing, or is refused and frees it. A claim refused for room would have pushed out records for a create
   * that may be refused after all.
   */
  hold (accountId: string, bytes: number): void {
    const known = this.#accounts.get(accountId)
    const account = known ?? { ...NOT_ADMITTED }
    // A refund is given back only as far as the account was charged: what is missing is a drift of the ledger.
    if (account.bytes + bytes < 0) {
      this.#driftBytes -= account.bytes + bytes
      bytes = -account.bytes
    }
    const next = account.bytes + bytes
    this.#ledger.sharedUsedBytes = sharedUsedAfter(this.#ledger, account, next)
    account.bytes = next
    this.#heldBytes += bytes
    this.#keep(accountId, account, known !== undefined)
  }

  refund (accountId: string, bytes: number): void {
    this.charge(accountId, -bytes)
  }

  /** What an account whose user the store keeps makes it keep, its sessions included. */
  heldBy (accountId: string): number {
    // Its user's record is charged to it, so it has an entry.
    const account = this.#accounts.get(accountId)!
    return account.bytes + account.sessions
  }

  /**
   * Gives the account's floor back, for an account removed: what it still holds (items not removed yet) draws on the
   * shared part until it goes.
   */
  release (accountId: string): void {
    const account = this.#accounts.get(accountId)
    if (account?.admitted !== true) return
    const released = { ...account, floor: 0, admitted: false }
    // What it held within its floor now counts against the shared part, as all it holds without one does.
    this.#ledger.sharedUsedBytes += Math.min(account.bytes, Math.max(0, account.floor - this.#bounds.sessionsBytes))
    this.#floorsBytes -= account.floor
    this.#admitted -= 1
    this.#accounts.set(accountId, released)
    this.#keep(accountId, released, true)
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
    const account = known ?? { ...NOT_ADMITTED }
    account.sessions += bytes
    this.#heldBytes += bytes
    this.#keep(accountId, account, known !== undefined)
  }

  // An account not admitted is kept only while it holds something.
  #keep (accountId: string, account: Account, known: boolean): void {
    if (!known) this.#accounts.set(accountId, account)
    else if (!account.admitted && account.bytes === 0 && account.sessions === 0) this.#accounts.delete(accountId)
  }

  reading (): CapacityReading {
    return {
      budgetBytes: this.#bounds.budgetBytes,
      heldBytes: this.#heldBytes,
      floorsKeptBytes: this.#floorsKeptBytes,
      floorsBytes: this.#floorsBytes,
      sharedUsedBytes: this.#ledger.sharedUsedBytes,
      accounts: this.#admitted,
      driftBytes: this.#driftBytes
    }
  }
}
