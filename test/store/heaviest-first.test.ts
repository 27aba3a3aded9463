import fc from 'fast-check'
import t from 'tap'
import { HeaviestFirst } from '../../src/store/heaviest-first.js'

t.test('whatever is added and taken away, in any order, the heaviest is the key that holds the most', async (t) => {
  const change = fc.record({ key: fc.integer({ min: 0, max: 7 }), delta: fc.integer({ min: -50, max: 50 }) })
  fc.assert(fc.property(fc.array(change, { maxLength: 200 }), (changes) => {
    const heap = new HeaviestFirst<number>()
    const held = new Map<number, number>()
    for (const { key, delta } of changes) {
      heap.add(key, delta)
      const weight = (held.get(key) ?? 0) + delta
      if (weight > 0) held.set(key, weight)
      else held.delete(key)
      const heaviest = heap.heaviest()
      const most = Math.max(0, ...held.values())
      if (heaviest === undefined ? held.size !== 0 : held.get(heaviest) !== most) return false
    }
    return true
  }))
  t.pass('held for every sequence fast-check tried')
})
