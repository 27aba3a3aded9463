// A sandbox's journal, said once for every store: what an entry records of a request, how entries are placed and
// found. A store keeps each entry's text at its place and reads them back in order (src/store/memory/journal.ts,
// the Redis stream of src/store/redis/sandboxes.ts); the operations API pages and waits on what this answers.
import type { components, operations } from '../../generated/operations/openapi.js'
import { schemas } from '../../generated/operations/schemas.js'

export type JournalEntry = components['schemas']['JournalEntry']
/** An entry as a request makes it: its place is the store's to give. */
export type JournalRecord = Omit<JournalEntry, 'position'>
export type CausedEvent = JournalEntry['events'][number]
export type JournalPosition = components['schemas']['JournalPosition']

/** An entry as a store keeps it: its place, and its record's text. */
export interface KeptEntry {
  readonly position: JournalPosition
  readonly text: string
}

// What a sandbox keeps of its journal at most: the newest so many entries, each within so many bytes of text, which
// what a record holds bounds (a request id of the caller's, an Idempotency-Key, one event).
export const SANDBOX_JOURNAL_ENTRIES = 500
export const JOURNAL_ENTRY_BYTES = 1024
export const SANDBOX_JOURNAL_BYTES = SANDBOX_JOURNAL_ENTRIES * JOURNAL_ENTRY_BYTES

// Waits on journals one instance holds at most: on one sandbox (a rig's workers sharing it), and on all of them
// (a worker a sandbox, as many sandboxes as a rig makes).
export const JOURNAL_WAITS_PER_SANDBOX = 32
export const JOURNAL_WAITS = 1000

// The longest Idempotency-Key an entry keeps, as the operations contract says; a longer one, refused, is not kept.
const { maxLength: IDEMPOTENCY_KEY_LENGTH } = schemas.JournalEntry.properties.idempotencyKey

/** What a request leaves in its sandbox's journal: its events only when it was answered as done (2xx). */
export function journalRecord (request: {
  readonly requestId: string
  readonly operationId: string | undefined
  readonly status: number
  readonly idempotencyKey: string | string[] | undefined
  readonly accountId: string | undefined
  readonly now: number
  readonly caused: readonly CausedEvent[] | null
}): JournalRecord {
  const { idempotencyKey } = request
  return {
    requestId: request.requestId,
    operationId: request.operationId ?? null,
    status: request.status,
    idempotencyKey: typeof idempotencyKey === 'string' && idempotencyKey.length <= IDEMPOTENCY_KEY_LENGTH ? idempotencyKey : null,
    accountId: request.accountId ?? null,
    time: new Date(request.now).toISOString(),
    events: request.status < 300 && request.caused !== null ? [...request.caused] : []
  }
}

// A place is "<ms>-<n>", as Redis names a stream's entries; each part fits a double exactly.
const parts = (position: JournalPosition): [number, number] => {
  const [ms = '0', n = '0'] = position.split('-')
  return [Number(ms), Number(n)]
}

/** Whether `position` comes after `than`. */
export function isAfter (position: JournalPosition, than: JournalPosition): boolean {
  const [ms, n] = parts(position)
  const [thanMs, thanN] = parts(than)
  return ms > thanMs || (ms === thanMs && n > thanN)
}

/** What a reader asks for, as the contract's query names it: entries that match every filter given. */
export type JournalFilter = Omit<NonNullable<operations['listSandboxJournal']['parameters']['query']>, 'after' | 'limit' | 'waitSeconds'>

// How an entry matches each filter: a filter the contract adds does not compile until it is said here.
const FILTERS: { readonly [Name in keyof JournalFilter]-?: (entry: JournalRecord, value: NonNullable<JournalFilter[Name]>) => boolean } = {
  requestId: (entry, value) => entry.requestId === value,
  idempotencyKey: (entry, value) => entry.idempotencyKey === value,
  operationId: (entry, value) => entry.operationId === value,
  type: (entry, value) => entry.events.some(({ type }) => type === value)
}

const matches = (entry: JournalRecord, filter: JournalFilter): boolean =>
  (Object.keys(FILTERS) as Array<keyof JournalFilter>).every((name) => {
    const value = filter[name]
    return value === undefined || FILTERS[name](entry, value)
  })

/**
 * The entries of `kept` (in order) that match, at most `limit`, and the place of the last one looked at: a wait
 * that found none reads on from there, each entry looked at once.
 */
export function journalMatches (kept: readonly KeptEntry[], filter: JournalFilter, limit: number): { entries: JournalEntry[], lookedAt: JournalPosition | undefined } {
  const entries: JournalEntry[] = []
  let lookedAt: JournalPosition | undefined
  for (const { position, text } of kept) {
    if (entries.length === limit) break
    lookedAt = position
    const record = JSON.parse(text) as JournalRecord
    if (matches(record, filter)) entries.push({ position, ...record })
  }
  return { entries, lookedAt }
}
