// The rules of a sandbox's lifecycle, said once for every store: how its clock moves and how a listing pages the
// sandboxes. A store reads what they need and commits what they answer in one atomic step of its own
// (src/store/memory/sandboxes.ts, src/store/redis/sandboxes.ts).

// How far a sandbox's clock may run ahead of the service's: its timestamps keep four-digit years.
export const SANDBOX_CLOCK_AHEAD_YEARS = 100
export const SANDBOX_CLOCK_AHEAD_MS = SANDBOX_CLOCK_AHEAD_YEARS * 365.25 * 24 * 3600 * 1000

/**
 * How far a sandbox's clock runs ahead of the service's once a move of `ms` from `aheadMs` is made: 'too far' (and no
 * move) past SANDBOX_CLOCK_AHEAD_MS. It only goes forward, so that nothing the sandbox timed comes back to life.
 */
export const clockAdvanced = (aheadMs: number, ms: number): number | 'too far' => aheadMs + ms > SANDBOX_CLOCK_AHEAD_MS ? 'too far' : aheadMs + ms

/**
 * The page of `ids` (every sandbox's, in any order) that a listing answers: at most `limit`, by id, those after
 * `after` (in any case) when it is given, and the last one's id when more follow.
 */
export function pageById (ids: Iterable<string>, after: string | undefined, limit: number): { readonly listed: string[], readonly next: string | undefined } {
  const following = [...ids].filter((id) => after === undefined || id > after.toLowerCase()).sort()
  const listed = following.slice(0, limit)
  return { listed, next: following.length > limit ? listed.at(-1) : undefined }
}
