import t from 'tap'
import { randomUuid } from '../../src/runtime/uuid.js'

// RFC 9562's version 4: the version nibble 4, the variant bits 10.
const VERSION_4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

t.test('random version 4 UUIDs, none repeated across many draws of random bytes', async (t) => {
  const ids = Array.from({ length: 10_000 }, () => randomUuid())
  t.equal(ids.filter((id) => !VERSION_4.test(id)).length, 0, 'every one is a version 4 UUID')
  t.equal(new Set(ids).size, ids.length, 'all distinct')
  // Every hex digit shows up in every random position: no digit is stuck, none is left unwritten.
  const digitsAt = Array.from({ length: 36 }, (_, position) => new Set(ids.map((id) => id[position])).size)
  for (const position of [0, 7, 9, 12, 15, 17, 20, 24, 35]) t.equal(digitsAt[position], 16, `16 digits at position ${position}`)
  t.equal(digitsAt[14], 1, 'the version')
  t.equal(digitsAt[19], 4, 'the variant')
})
