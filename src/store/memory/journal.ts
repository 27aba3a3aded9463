import { isAfter, type JournalPosition, type JournalRecord, type KeptEntry, SANDBOX_JOURNAL_ENTRIES } from '../../domain/journal.js'

/**
 * A sandbox's journal in this process: its newest SANDBOX_JOURNAL_ENTRIES entries, placed "0-<n>" in the order they
 * were added. Emptied by a reset, its places go on from where they were, so that a reader's place stays behind
 * every entry added after it.
 */
export class MemoryJournal {
  readonly #kept: KeptEntry[] = []
  #added = 0

  add (record: JournalRecord): void {
    this.#added += 1
    this.#kept.push({ position: `0-${this.#added}`, text: JSON.stringify(record) })
    if (this.#kept.length > SANDBOX_JOURNAL_ENTRIES) this.#kept.shift()
  }

  after (position: JournalPosition): KeptEntry[] {
    const first = this.#kept.findIndex((kept) => isAfter(kept.position, position))
    return first === -1 ? [] : this.#kept.slice(first)
  }

  empty (): void {
    this.#kept.length = 0
  }
}
