import t, { type Test } from 'tap'
import { MemoryRateCounter } from '../../../src/store/memory/rate-counter.js'

const WINDOW_MS = 60_000

function storeOf (capacity: number): (key: string, max?: number, windowMs?: number) => number {
  const counter = new MemoryRateCounter(capacity)
  return (key, max = 1, windowMs = WINDOW_MS) => {
    let current = NaN
    counter.incr(key, windowMs, max, (counted) => { current = counted.current })
    return current
  }
}

// Windows end by the clock the counter reads, which these tests move: a busy machine's pauses end none early.
const stoppedClock = (t: Test): { advance: (ms: number) => void } => {
  let now = 1_000_000
  t.capture(Date, 'now', () => now)
  return { advance: (ms) => { now += ms } }
}

t.test('counts each key in its window, and past its capacity forgets the key whose window began first', async (t) => {
  const count = storeOf(2)
  t.same([count('a', 10), count('b', 10), count('a', 10), count('c', 10)], [1, 1, 2, 1])
  t.equal(count('a', 10), 1, 'a\'s window began first: forgotten, though counted after b\'s')
  t.equal(count('c', 10), 2)
})

t.test('a key whose window has ended begins a new one, and leaves last', async (t) => {
  const clock = stoppedClock(t)
  const count = storeOf(2)
  count('a', 10, 50)
  clock.advance(30)
  count('b', 10, 50)
  clock.advance(30)
  t.equal(count('a', 10, 50), 1, 'a new window')
  count('c', 10, 50)
  t.equal(count('a', 10, 50), 2, 'kept: b\'s window began before a\'s new one')
  t.equal(count('b', 10, 50), 1, 'b was forgotten')
})

t.test('a key over its limit is kept however many keys follow, and forgotten once its window ends', async (t) => {
  const clock = stoppedClock(t)
  const count = storeOf(2)
  t.same([count('locked', 1, 20), count('locked', 1, 20)], [1, 2])
  for (const junk of ['j1', 'j2', 'j3', 'j4']) count(junk, 1, 20)
  t.equal(count('locked', 1, 20), 3, 'still counted')
  clock.advance(25)
  t.equal(count('locked', 1, 20), 1, 'a new window')
})

t.test('once as many keys as it keeps are locked, a further one stays evictable until an ended lock makes room', async (t) => {
  const clock = stoppedClock(t)
  const count = storeOf(1)
  const WINDOW = 20
  t.same([count('first', 1, WINDOW), count('first', 1, WINDOW)], [1, 2], 'locked: the one place is taken')
  t.same([count('second', 1, WINDOW), count('second', 1, WINDOW)], [1, 2], 'over its limit, but not locked')
  count('third', 1, WINDOW)
  t.equal(count('second', 1, WINDOW), 1, 'so it was pushed out')
  clock.advance(WINDOW + 5)
  t.same([count('second', 1, WINDOW), count('second', 1, WINDOW)], [1, 2], 'locked, in the place of the ended lock')
  count('fourth', 1, WINDOW)
  count('fifth', 1, WINDOW)
  t.equal(count('second', 1, WINDOW), 3, 'never pushed out')
})
