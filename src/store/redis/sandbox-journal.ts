import { type JournalPosition, type JournalRecord, type KeptEntry, SANDBOX_JOURNAL_ENTRIES } from '../../domain/journal.js'
import { call } from './commands.js'
import { Change, commit, PRESENT } from './commit.js'
import type { RedisKeys } from './keys.js'
import type { RedisConnection } from './store.js'
import type { StoreWrites } from './writes.js'

// The key of a sandbox's journal: outside its generations, so that a reader's place holds across a reset.
const journalKey = (keys: RedisKeys, id: string): string => `${keys.sandboxJournal}${id}`

/** `change` empties the sandbox's journal too (a reset's, a deletion's), and tells every instance. */
export const journalEmptied = (change: Change, keys: RedisKeys, id: string): Change =>
  change.write('DEL', journalKey(keys, id)).write('PUBLISH', keys.sandboxJournals, id)

/**
 * The sandboxes' journals, each a stream of its newest SANDBOX_JOURNAL_ENTRIES entries (keys.sandboxJournal). Each
 * change publishes the sandbox's id (keys.sandboxJournals), which every instance hears on its invalidation
 * connection (tracking.ts) and tells the listeners.
 */
export class RedisJournals {
  readonly #connection: RedisConnection
  readonly #writes: StoreWrites
  readonly #keys: RedisKeys
  readonly #listeners: Array<(id: string) => void>

  /** `listeners`: told by the tracking of each change Redis tells of. */
  constructor (connection: RedisConnection, writes: StoreWrites, keys: RedisKeys, listeners: Array<(id: string) => void>) {
    this.#connection = connection
    this.#writes = writes
    this.#keys = keys
    this.#listeners = listeners
  }

  /** Added only while the sandbox is registered: a request still in flight when it is deleted leaves nothing behind. */
  async note (id: string, record: JournalRecord): Promise<void> {
    const keys = this.#keys
    await commit(this.#connection.redis, this.#writes, keys, new Change().guard(keys.sandboxes, id, PRESENT)
      .write('XADD', journalKey(keys, id), 'MAXLEN', String(SANDBOX_JOURNAL_ENTRIES), '*', 'entry', JSON.stringify(record)).write('PUBLISH', keys.sandboxJournals, id))
  }

  async after (id: string, position: JournalPosition): Promise<KeptEntry[] | undefined> {
    const { redis } = this.#connection
    const [registered, entries] = await Promise.all([call(redis.hexists(this.#keys.sandboxes, id)), call(redis.xrange(journalKey(this.#keys, id), `(${position}`, '+'))])
    if (registered === 0) return undefined
    return entries.map(([entryPosition, [, text = '']]) => ({ position: entryPosition, text }))
  }

  onChange (listener: (id: string) => void): void {
    this.#listeners.push(listener)
  }
}
