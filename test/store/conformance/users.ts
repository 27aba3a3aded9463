// What every Store promises of users: one per email key, ids never overwritten.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import { IdTakenError } from '../../../src/store/store.js'
import { account, type FreshStore, item, type OpenStore, read, readPage, user } from './fixtures.js'

export function usersConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('users: added once per email key, found by id and by email key, as added', async (t) => {
    const { users } = await fresh(t)
    const ada = user()
    t.same(await users.add(ada), ada)
    t.same(await users.get(ada.id), ada)
    t.same(await users.findByEmailKey(ada.emailKey), ada)
    t.equal(await users.add(user({ emailKey: ada.emailKey })), undefined, 'the email key is taken')
    t.equal(await users.get(randomUUID()), undefined)
    t.equal(await users.findByEmailKey('nobody@example.com'), undefined)
    t.ok(Object.isFrozen(await users.get(ada.id)), 'handed out frozen')
  })

  t.test('users: past the accounts the store admits, a registration is refused and keeps nothing; a removal frees a place', async (t) => {
    const store = await open(t, { maxItemsPerContributor: 10, accounts: { accounts: 2, quotaBytes: Infinity } })
    const ada = await account(store.users)
    t.ok(await store.users.add(user()))
    const refused = user()
    await t.rejects(store.users.add(refused), { name: 'StoreFullError', accounts: 2 })
    t.equal(await store.users.get(refused.id), undefined)
    t.same(await store.usage(), { accounts: 2, heldBytes: 0 }, 'two accounts, keeping nothing yet')
    t.ok(await store.accounts.remove(ada))
    t.ok(await store.users.add(refused), 'a place freed')
  })

  t.test('ids are never overwritten: a user or an item whose id exists is refused, and what holds it is unchanged', async (t) => {
    const { users, items } = await fresh(t)
    const ada = user()
    await users.add(ada)
    await t.rejects(users.add(user({ id: ada.id })), IdTakenError, 'a new email, an id that is taken')
    t.same(await users.get(ada.id), ada, 'the user is as added')
    t.equal(await users.findByEmailKey(user({ id: ada.id }).emailKey), undefined)
    const first = item(ada.id)
    await items.add(first)
    const grace = user()
    await users.add(grace)
    await t.rejects(items.add(item(grace.id, { id: first.id, name: 'Renamed' })), IdTakenError, 'another owner, an id that is taken')
    t.same(read(await items.get(first.id)), first, 'the item is as added')
    t.same(readPage(await items.page(0, 10, { contributorId: grace.id })), { items: [], total: 0 }, 'and counted for nobody else')
    t.same(readPage(await items.page(0, 10, { contributorId: ada.id })), { items: [first], total: 1 })
  })

  t.test('users: of concurrent additions with one email key, exactly one succeeds', async (t) => {
    const { users } = await fresh(t)
    const emailKey = `same-${randomUUID()}@example.com`
    const outcomes = await Promise.all(Array.from({ length: 20 }, async () => await users.add(user({ emailKey }))))
    t.equal(outcomes.filter((outcome) => outcome !== undefined).length, 1)
  })
}
