// A page of a subscriber's dead letters, decided alike on every store.

/** How many of a page's candidates it lists, and whether more follow it. */
export interface ListedPage {
  readonly listed: number
  readonly more: boolean
}

/**
 * The page of the dead letters after its place, given their events' sizes (UTF-8 bytes), oldest first, one more than
 * `limit` at most: within `limit`, and, when it carries their events, within `bodyBytes` of them (its first whatever its size).
 */
export function deadLetterPage (eventBytes: readonly number[], limit: number, bodyBytes: number | undefined): ListedPage {
  let budget = bodyBytes ?? Number.POSITIVE_INFINITY
  for (const [listed, bytes] of eventBytes.entries()) {
    if (listed === limit || (listed > 0 && bytes > budget)) return { listed, more: true }
    budget -= bytes
  }
  return { listed: eventBytes.length, more: false }
}
