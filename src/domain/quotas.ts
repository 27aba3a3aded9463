// What one account may make a store keep, said once for every store: a count of accounts, and for each a quota of
// bytes, the UTF-8 length of the texts it keeps (its items' and its idempotency records'), whatever properties the
// contract gives them. Counts bound the rest (items, keys, sessions and the token hashes each remembers): see
// src/domain/bounds.ts. A store reads what these rules need and commits what they answer in one atomic step.

/** How many accounts a store admits, and what each keeps at most. */
export interface AccountBounds {
  /** Accounts the store holds at most (MAX_ACCOUNTS; a sandbox's, SANDBOX_ACCOUNTS). */
  readonly accounts: number
  /** Bytes of texts each account keeps at most (ACCOUNT_QUOTA_KIB). */
  readonly quotaBytes: number
}

/** No bound: a store built without bounds (embedding, the conformance suite) refuses nothing for room. */
export const UNBOUNDED_ACCOUNTS: AccountBounds = { accounts: Infinity, quotaBytes: Infinity }

/** What a text kept for an account counts against its quota. */
export const textBytes = (text: string): number => Buffer.byteLength(text)

/** Whether `more` bytes (a change that frees never does) would take an account holding `held` past `quotaBytes`. */
export const passesQuota = (held: number, more: number, quotaBytes: number): boolean => more > 0 && held + more > quotaBytes

/**
 * The idempotency records an account forgets so that `more` bytes fit its quota: its oldest first (`records`, those
 * it may forget, oldest first), as few as it takes; none when it fits already; undefined when even all of them would
 * not do, and the write is refused. A record is a retry's answer, and the account's own: its newest writes come
 * before its oldest retries, as a count of keys past its bound forgets the oldest.
 */
export function recordsForgotten<Record extends { readonly bytes: number }> (records: Iterable<Record>, held: number, more: number, quotaBytes: number): Record[] | undefined {
  const forgotten: Record[] = []
  let freed = 0
  if (!passesQuota(held, more, quotaBytes)) return forgotten
  for (const record of records) {
    forgotten.push(record)
    freed += record.bytes
    if (!passesQuota(held - freed, more, quotaBytes)) return forgotten
  }
  return undefined
}
