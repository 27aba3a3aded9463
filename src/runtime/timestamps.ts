interface SecondText {
  second: number
  /** Everything up to and including the decimal point: "2026-11-23T12:34:56." */
  prefix: string
}

// The two seconds written last, the latest first. Two, because an item edited more often than once a millisecond
// has an updatedAt ahead of the clock (src/handlers/items.ts): each of its edits writes the clock's time, then the
// item's next one, in another second. With one second kept, each such edit wrote both anew.
let latest: SecondText = { second: Number.NaN, prefix: '' }
let before: SecondText = { second: Number.NaN, prefix: '' }

function prefixOf (second: number): string {
  if (second !== latest.second) {
    const other = second === before.second ? before : { second, prefix: new Date(second * 1000).toISOString().slice(0, -4) }
    before = latest
    latest = other
  }
  return latest.prefix
}

/**
 * A time (milliseconds since the epoch) as `Date.prototype.toISOString` writes it:
 * `2026-11-23T12:34:56.789Z`. V8 formats that with snprintf, which costs as much as the rest of a create's handler
 * (docs/performance.md); here the text up to the second is kept, so within a second only the milliseconds are
 * written.
 */
export function isoTimestamp (ms: number): string {
  const second = Math.floor(ms / 1000)
  const millis = ms - second * 1000
  return `${prefixOf(second)}${millis < 10 ? '00' : millis < 100 ? '0' : ''}${millis}Z`
}
