// What every Store promises of items: added, paged, edited and removed, bounded per contributor; the store open until closed.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import type { Item } from '../../../src/domain/index.js'
import { type Counted, type ItemFilter, UserRemovedError } from '../../../src/store/store.js'
import { TEXT } from '../../../src/domain/serialized.js'
import { account, ADDED, announce, bodies, count, EDITED, type FreshStore, HOUR, item, type OpenStore, read, readPage, REMOVED, user, writeLimit } from './fixtures.js'

export function itemsConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('items: added, got, paged in creation order with the total', async (t) => {
    const { users, items } = await fresh(t)
    t.equal(await items.count(), 0)
    const contributorId = await account(users)
    const added = []
    for (let index = 0; index < 5; index += 1) added.push(await items.add(item(contributorId, { name: `item ${index}`, description: index === 0 ? 'ü€𝄞' : null })))
    t.same(added.map((one) => one?.name), ['item 0', 'item 1', 'item 2', 'item 3', 'item 4'])
    t.same(read(await items.get(added[0]!.id)), added[0])
    t.ok(Object.isFrozen(await items.get(added[0]!.id)), 'handed out frozen')
    t.equal(await items.get(randomUUID()), undefined)
    t.same(readPage(await items.page(0, 2)), { items: added.slice(0, 2), total: 5 })
    t.same(readPage(await items.page(3, 10)), { items: added.slice(3), total: 5 })
    t.same(readPage(await items.page(10, 10)), { items: [], total: 5 })
    t.equal(await items.count(), 5)
    await items.remove(added[1]!.id, () => {})
    t.equal(await items.count(), 4, 'a removed item is no longer counted')
  })

  t.test('items: whatever text the contract accepts is stored, read, edited and removed: lone surrogates, every control character, U+2028 and U+2029', async (t) => {
    const { users, items } = await fresh(t)
    const contributorId = await account(users)
    const texts = ['\ud800', 'a\udfffb', '\udc00\ud800', Array.from({ length: 32 }, (_, code) => String.fromCharCode(code)).join(''), '\u2028\u2029\u007f', '"\\/']
    for (const [index, text] of texts.entries()) {
      const added = (await items.add(item(contributorId, { name: text, description: text })))!
      // Named by its place: a U+2028 in a test's name would end its line of TAP.
      t.same(read(await items.get(added.id)), added, `text ${index}: read as written`)
      t.equal(String((await items.get(added.id))?.[TEXT]), added[TEXT], `text ${index}: its text, as written`)
      const edited = await items.update(added.id, (current) => ({ ...current, name: `${text}${text}`, status: 'archived' }))
      t.equal(edited?.name, `${text}${text}`, 'edited')
      t.same(readPage(await items.page(0, 1, { contributorId, status: 'archived' })).items, [edited], 'listed by contributor and status')
      t.same(await items.remove(added.id, () => {}), edited, 'removed')
    }
    t.equal(await items.count(), 0)
  })

  t.test('items: pages of one status, one contributor or both, in creation order, each with its own total; a status change moves an item to its place', async (t) => {
    const { users, items } = await fresh(t)
    const [ada, grace] = [await account(users), await account(users)]
    const added: Item[] = []
    // Ada's and Grace's in turn; every third archived.
    for (let index = 0; index < 9; index += 1) {
      added.push((await items.add(item(index % 2 === 0 ? ada : grace, { name: `item ${index}`, status: index % 3 === 0 ? 'archived' : 'active' })))!)
    }
    const ids = (kept: (one: Item) => boolean): string[] => added.filter(kept).map((one) => one.id)
    const pageIds = async (filter: ItemFilter, offset = 0, limit = 100): Promise<{ ids: string[], total: number }> => {
      const { items: page, total } = await items.page(offset, limit, filter)
      return { ids: page.map((one) => read(one)!.id), total }
    }
    const expectations: Array<[ItemFilter, (one: Item) => boolean]> = [
      [{}, () => true],
      [{ status: 'active' }, (one) => one.status === 'active'],
      [{ status: 'archived' }, (one) => one.status === 'archived'],
      [{ contributorId: ada }, (one) => one.contributorId === ada],
      [{ contributorId: grace, status: 'archived' }, (one) => one.contributorId === grace && one.status === 'archived']
    ]
    for (const [filter, kept] of expectations) {
      t.same(await pageIds(filter), { ids: ids(kept), total: ids(kept).length }, JSON.stringify(filter))
    }
    t.same(await pageIds({ contributorId: ada, status: 'active' }, 1, 2), { ids: ids((one) => one.contributorId === ada && one.status === 'active').slice(1, 3), total: 3 },
      'a page past the first')
    t.same(await pageIds({ contributorId: randomUUID() }), { ids: [], total: 0 }, 'a contributor with no items')

    // Archive the fifth item (Ada's, active), reactivate the first (Ada's, archived), remove the second (Grace's).
    const [first, second, , , fifth] = added
    await items.update(fifth!.id, (current) => ({ ...current, status: 'archived' }))
    await items.update(first!.id, (current) => ({ ...current, status: 'active' }))
    await items.update(first!.id, (current) => ({ ...current, name: 'renamed, still active' }))
    await items.remove(second!.id, () => {})
    const now = await Promise.all(added.filter((one) => one.id !== second!.id).map(async (one) => read(await items.get(one.id))!))
    for (const [filter] of expectations) {
      const kept = now.filter((one) => (filter.status === undefined || one.status === filter.status) && (filter.contributorId === undefined || one.contributorId === filter.contributorId))
      t.same(await pageIds(filter), { ids: kept.map((one) => one.id), total: kept.length }, `after the changes, ${JSON.stringify(filter)}: in creation order still`)
    }
  })

  t.test('items: a contributor owns at most as many as the store allows; removing one frees its place', async (t) => {
    const { users, items } = await fresh(t, 2)
    const contributorId = await account(users)
    const first = await items.add(item(contributorId))
    await items.add(item(contributorId))
    t.equal(await items.add(item(contributorId)), undefined, 'over the quota')
    t.ok(await items.add(item(await account(users))), 'another contributor is not affected')
    await items.remove(first!.id, () => {})
    t.ok(await items.add(item(contributorId)), 'room again')
  })

  t.test('items: concurrent additions get every one stored, each once', async (t) => {
    const { users, items } = await fresh(t)
    await Promise.all(Array.from({ length: 60 }, async () => await items.add(item(await account(users)))))
    const { items: page, total } = await items.page(0, 100)
    t.equal(total, 60)
    t.equal(new Set(page.map((one) => read(one)!.id)).size, 60)
  })

  t.test('items: update replaces with what the change returns; a throwing change leaves the item as it was', async (t) => {
    const { users, items } = await fresh(t)
    const original = await items.add(item(await account(users)))
    const updated = await items.update(original!.id, (current) => ({ ...current, name: 'renamed', status: 'archived' }))
    t.same(updated, { ...original, name: 'renamed', status: 'archived' })
    t.same(read(await items.get(original!.id)), updated)
    await t.rejects(items.update(original!.id, () => { throw new Error('not yours') }), { message: 'not yours' })
    t.same(read(await items.get(original!.id)), updated)
    t.equal(await items.update(randomUUID(), (current) => current), undefined)
  })

  t.test('items: remove hands back the item as it was; a throwing confirm removes nothing', async (t) => {
    const { users, items } = await fresh(t)
    const kept = await items.add(item(await account(users)))
    await t.rejects(items.remove(kept!.id, () => { throw new Error('not yours') }), { message: 'not yours' })
    t.same(read(await items.get(kept!.id)), kept)
    t.same(await items.remove(kept!.id, () => {}), kept)
    t.equal(await items.get(kept!.id), undefined)
    t.same(readPage(await items.page(0, 10)), { items: [], total: 0 })
    t.equal(await items.remove(kept!.id, () => {}), undefined)
  })

  t.test('items: concurrent edits all apply, one after another, and an edit racing a delete is consistent', async (t) => {
    const { users, items } = await fresh(t)
    const counter = await items.add(item(await account(users), { name: '0' }))
    await Promise.all(Array.from({ length: 20 }, async () =>
      await items.update(counter!.id, (current) => ({ ...current, name: String(Number(current.name) + 1) }))))
    t.equal(read(await items.get(counter!.id))?.name, '20', 'no edit lost')
    const raced = await items.add(item(await account(users)))
    const [edited, removed] = await Promise.all([
      items.update(raced!.id, (current) => ({ ...current, name: 'edited' })),
      items.remove(raced!.id, () => {})
    ])
    t.ok(removed, 'the delete happened')
    t.equal(await items.get(raced!.id), undefined)
    t.ok(edited === undefined || edited.name === 'edited', 'the edit happened before it, or found nothing')
    t.ok(removed?.name === (edited === undefined ? 'An item' : 'edited'), 'the delete removed what the edit left')
  })

  t.test('items: a write limit counts in the write\'s own step, on its rate counter; over it, nothing is written and its refusal rejects; a write refused before counts nothing', async (t) => {
    const store = await fresh(t)
    const { users, items, outbox } = store
    await outbox.subscribe('s', [ADDED, EDITED, REMOVED])
    const contributorId = await account(users)
    const told: Counted[] = []
    const limit = writeLimit(contributorId, 3, told)
    const first = (await items.add(item(contributorId), announce(ADDED), undefined, limit))!
    const edited = await items.update(first.id, (current) => ({ ...current, name: 'edited' }), announce(EDITED), limit)
    t.same(told.map(({ current }) => current), [1, 2], 'an add and an edit count together')
    t.ok(told.every(({ ttl }) => ttl > 0 && ttl <= HOUR), 'each with what is left of its window')
    await t.rejects(items.update(first.id, () => { throw new Error('not yours') }, announce(EDITED), limit), { message: 'not yours' })
    t.equal(await items.update(randomUUID(), (current) => current, announce(EDITED), limit), undefined)
    await t.rejects(items.remove(first.id, () => { throw new Error('not yours') }, announce(REMOVED), limit), { message: 'not yours' })
    t.equal(await items.remove(randomUUID(), () => {}, announce(REMOVED), limit), undefined)
    t.equal(told.length, 2, 'a change or confirm that throws, or no item, counts nothing')
    const second = (await items.add(item(contributorId), announce(ADDED), undefined, limit))!
    await t.rejects(items.add(item(contributorId), announce(ADDED), undefined, limit), { message: 'over, at 4' })
    await t.rejects(items.update(second.id, (current) => ({ ...current, name: 'late' }), announce(EDITED), limit), { message: 'over, at 5' })
    await t.rejects(items.remove(second.id, () => {}, announce(REMOVED), limit), { message: 'over, at 6' })
    t.same(told.map(({ current }) => current), [1, 2, 3, 4, 5, 6], 'each told, refused or not')
    t.same(readPage(await items.page(0, 10)), { items: [edited, second], total: 2 }, 'nothing written over the limit')
    t.same(bodies((await outbox.take('s', Date.now(), 10, HOUR)).deliveries).map((body) => (body as { channel: string }).channel), [ADDED, EDITED, ADDED], 'and no event')
    t.equal((await count(store, 'writes', contributorId, HOUR)).current, 7, 'on the rate counter of its name')
    t.ok(await items.add(item(contributorId), announce(ADDED)), 'a write no limit counts is done')
  })

  t.test('items: none is added or edited for a contributor whose account is removed, or was never made; its items can still be removed', async (t) => {
    const { items, users, sessions, accounts, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED, EDITED, REMOVED])
    const removedId = await account(users)
    const kept = (await items.add(item(removedId)))!
    t.ok(await accounts.remove(removedId))
    await t.rejects(items.add(item(removedId), announce(ADDED)), UserRemovedError, 'an add for a removed account')
    await t.rejects(items.add(item(user().id), announce(ADDED)), UserRemovedError, 'an add for a user the store never had')
    await t.rejects(items.update(kept.id, (current) => ({ ...current, name: 'edited' }), announce(EDITED)), UserRemovedError, 'an edit of its item')
    t.same(read(await items.get(kept.id)), kept, 'the item as it was')
    await t.rejects(sessions.open({ id: randomUUID(), userId: removedId, expiresAt: Date.now() + HOUR }, 'hash', 20), UserRemovedError, 'nor a session')
    t.same(await items.remove(kept.id, () => {}, announce(REMOVED)), kept, 'the removal of its items goes on')
    t.same(bodies((await outbox.take('s', Date.now(), 10, HOUR)).deliveries).map((body) => (body as { channel: string }).channel), [REMOVED], 'one event, the removal\'s')
    t.same(readPage(await items.page(0, 10)), { items: [], total: 0 })
  })

  t.test('available until closed', async (t) => {
    const store = await fresh(t)
    t.equal(store.available(), true)
    await store.close()
    t.equal(store.available(), false)
  })
}
