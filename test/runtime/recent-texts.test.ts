import t from 'tap'
import { RecentTexts } from '../../src/runtime/recent-texts.js'

t.test('texts kept within a bound of characters, keys and texts together: past it, those kept longest ago go first', async (t) => {
  const texts = new RecentTexts(20)
  const kept = (): Array<string | undefined> => ['a', 'b', 'c', 'd'].map((key) => texts.get(key))
  texts.set('a', '123456789')
  texts.set('b', '123456789')
  t.same(kept(), ['123456789', '123456789', undefined, undefined], 'twenty characters: both')
  texts.set('c', '1')
  t.same(kept(), [undefined, '123456789', '1', undefined], 'two more: the oldest out')
  texts.set('b', '12')
  texts.set('d', '123456789')
  t.same(kept(), [undefined, '12', '1', '123456789'], 'a key set again counts its new text alone, and is kept as new')
  texts.set('e', '1234567890123456789')
  t.same([...kept(), texts.get('e')], [undefined, undefined, undefined, undefined, '1234567890123456789'], 'a text that fills the bound alone')
  texts.set('f', '12345678901234567890')
  t.equal(texts.get('f'), undefined, 'one past the bound alone is not kept')
  t.equal(texts.get('e'), '1234567890123456789', 'and moves nothing out')
  texts.set('e', undefined)
  t.equal(texts.get('e'), undefined, 'forgotten')
  texts.set('a', '1234567890123456789')
  t.equal(texts.get('a'), '1234567890123456789', 'its characters freed')
})
