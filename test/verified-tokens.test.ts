import t from 'tap'
import { VerifiedTokens } from '../src/auth/verified-tokens.js'

t.test('keeps claims until their exp second has passed', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(10)
  tokens.remember('a', { exp: 100 })
  t.same(tokens.get('a', 100_000), { exp: 100 })
  t.equal(tokens.get('a', 100_001), undefined)
  t.equal(tokens.get('a', 0), undefined, 'an expired entry is forgotten')
})

t.test('once full, makes room by forgetting the oldest entry', async (t) => {
  const tokens = new VerifiedTokens<{ exp: number }>(2)
  tokens.remember('first', { exp: 1 })
  tokens.remember('second', { exp: 2 })
  tokens.remember('third', { exp: 3 })
  t.equal(tokens.get('first', 0), undefined)
  t.same(tokens.get('second', 0), { exp: 2 })
  t.same(tokens.get('third', 0), { exp: 3 })
})
