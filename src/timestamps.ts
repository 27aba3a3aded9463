let cachedSecond = Number.NaN
let cachedPrefix = ''

/**
 * A time (milliseconds since the epoch, now by default) as `Date.prototype.toISOString` writes it:
 * `2026-11-23T12:34:56.789Z`. V8 formats that with snprintf, about 7 000 instructions a call, as much as the rest of
 * a create's handler (npm run bench:instructions); here the text up to the second is kept, so within a second only
 * the milliseconds are written.
 */
export function isoTimestamp (ms = Date.now()): string {
  const second = Math.floor(ms / 1000)
  if (second !== cachedSecond) {
    cachedSecond = second
    // Everything up to and including the decimal point: "2026-11-23T12:34:56."
    cachedPrefix = new Date(second * 1000).toISOString().slice(0, -4)
  }
  const millis = ms - second * 1000
  return `${cachedPrefix}${millis < 10 ? '00' : millis < 100 ? '0' : ''}${millis}Z`
}
