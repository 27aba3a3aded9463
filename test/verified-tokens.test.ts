import t from 'tap'
import { VerifiedTokens } from '../src/auth/verified-tokens.js'

const first = {}
const second = {}

t.test('keeps claims until their exp second has passed, on every connection', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(10)
  tokens.remember('Bearer a', first, { exp: 100 })
  t.same(tokens.get('Bearer a', first, 100_000), { exp: 100 }, 'on the connection that verified it')
  t.same(tokens.get('Bearer a', second, 100_000), { exp: 100 }, 'on another connection')
  t.equal(tokens.get('Bearer a', first, 100_001), undefined)
  t.equal(tokens.get('Bearer a', second, 100_001), undefined)
  t.equal(tokens.get('Bearer a', {}, 0), undefined, 'an expired entry is forgotten')
})

t.test('knows a header by its exact text only', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(10)
  tokens.remember('Bearer a', first, { exp: 100 })
  t.equal(tokens.get('Bearer b', first, 0), undefined)
  t.equal(tokens.get('bearer a', second, 0), undefined)
})

t.test('once full, makes room by forgetting the oldest entry; each connection keeps its last header', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(2)
  tokens.remember('first', first, { exp: 1 })
  tokens.remember('second', second, { exp: 2 })
  tokens.remember('third', second, { exp: 3 })
  t.equal(tokens.get('first', second, 0), undefined)
  t.same(tokens.get('first', first, 0), { exp: 1 })
  t.same(tokens.get('second', first, 0), { exp: 2 })
  t.same(tokens.get('third', first, 0), { exp: 3 })
})
