import fc from 'fast-check'
import t from 'tap'
import { isoTimestamp } from '../../src/runtime/timestamps.js'

// Up to the last millisecond of year 9999: beyond it toISOString writes six-digit years, which no item will see.
const LAST_FOUR_DIGIT_YEAR_MS = 253_402_300_799_999

t.test('writes any time as toISOString does, in any order of calls', async (t) => {
  const times = fc.array(fc.integer({ min: 0, max: LAST_FOUR_DIGIT_YEAR_MS }), { minLength: 1 })
  t.doesNotThrow(() => {
    fc.assert(fc.property(times, (list) => list.every((ms) => isoTimestamp(ms) === new Date(ms).toISOString())), { numRuns: 500 })
  })
})

t.test('every millisecond across a second boundary, and the same second again after another', async (t) => {
  const start = Date.UTC(2026, 10, 23, 23, 59, 59, 990)
  for (let ms = start; ms < start + 20; ms += 1) t.equal(isoTimestamp(ms), new Date(ms).toISOString())
  t.equal(isoTimestamp(start), '2026-11-23T23:59:59.990Z')
  t.equal(isoTimestamp(0), '1970-01-01T00:00:00.000Z')
  t.equal(isoTimestamp(start + 9), '2026-11-23T23:59:59.999Z')
})

// An edit of an item whose updatedAt is ahead of the clock writes the clock's time, then the item's next one.
t.test('times of two and three seconds in turn', async (t) => {
  const seconds = [Date.UTC(2026, 10, 23, 12, 0, 0), Date.UTC(2026, 10, 23, 12, 0, 7), Date.UTC(2030, 0, 1)]
  const turns = [0, 1, 0, 1, 2, 0, 2, 1, 1, 0, 0]
  for (const [step, index] of turns.entries()) {
    const ms = seconds[index]! + step
    t.equal(isoTimestamp(ms), new Date(ms).toISOString())
  }
})
