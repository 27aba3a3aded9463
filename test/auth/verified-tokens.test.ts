import t from 'tap'
import { VerifiedTokens } from '../../src/auth/verified-tokens.js'

const first = {}
const second = {}
const bounds = { maxBytes: 10, maxTokenLength: 1 }

t.test('keeps claims until their exp second has passed, on every connection', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(bounds)
  tokens.remember('a', 'Bearer a', first, { exp: 100 })
  t.same(tokens.byConnection('Bearer a', first, 100_000), { exp: 100 }, 'on the connection that verified it')
  t.same(tokens.get('a', 'Bearer  a', second, 100_000), { exp: 100 }, 'on another connection, in another spelling')
  t.same(tokens.byConnection('Bearer  a', second, 100_000), { exp: 100 }, 'which that connection then knows')
  t.equal(tokens.byConnection('Bearer a', first, 100_001), undefined)
  t.equal(tokens.get('a', 'Bearer a', second, 100_001), undefined)
  t.equal(tokens.size, 0, 'an expired entry is forgotten')
})

t.test('a connection knows the exact header it last verified only', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(bounds)
  tokens.remember('a', 'Bearer a', first, { exp: 100 })
  t.equal(tokens.byConnection('Bearer  a', first, 0), undefined)
  t.equal(tokens.byConnection('Bearer a', second, 0), undefined)
})

t.test('bounded in bytes: as many tokens as the longest allowed fits in the bytes, the oldest out first', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>({ maxBytes: 5, maxTokenLength: 2 })
  t.equal(tokens.capacity, 2)
  tokens.remember('t1', 'Bearer t1', first, { exp: 1 })
  tokens.remember('t2', 'Bearer t2', second, { exp: 2 })
  tokens.remember('t3', 'Bearer t3', second, { exp: 3 })
  t.equal(tokens.size, 2)
  t.equal(tokens.get('t1', 'Bearer t1', second, 0), undefined)
  t.same(tokens.byConnection('Bearer t1', first, 0), { exp: 1 }, 'a connection keeps its last header')
  t.same(tokens.get('t3', 'Bearer t3', first, 0), { exp: 3 })
  t.throws(() => { tokens.remember('t44', 'Bearer t44', first, { exp: 4 }) }, RangeError, 'a token longer than allowed is never kept')
  t.equal(new VerifiedTokens({ maxBytes: 1, maxTokenLength: 2 }).capacity, 1, 'always room for one')
})
