// What every Store promises of rate counters, and the store's clock.
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { count, type FreshStore, HOUR, type OpenStore, peek } from './fixtures.js'

export function rateCountersConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('rate counters: count per key in a window, apart per name, afresh once the window ends', async (t) => {
    const store = await fresh(t)
    t.same([(await count(store, 'a', 'k', 100)).current, (await count(store, 'a', 'k', 100)).current], [1, 2])
    t.equal((await count(store, 'b', 'k', 100)).current, 1, 'another limit')
    t.equal((await count(store, 'a', 'other', 100)).current, 1, 'another key')
    const { ttl } = await count(store, 'a', 'k', 100)
    t.ok(ttl > 0 && ttl <= 100, `ttl ${ttl}`)
    t.match(await peek(store, 'a', 'k', 100), { current: 3, ttl: Number }, 'a peek counts nothing')
    t.equal(await peek(store, 'a', 'never-counted', 100), undefined)
    await sleep(110)
    t.equal(await peek(store, 'a', 'k', 100), undefined, 'the window has ended')
    t.equal((await count(store, 'a', 'k', 100)).current, 1)
  })

  t.test('now: the store\'s clock in milliseconds since the epoch; on this host, this process\'s within a few', async (t) => {
    const store = await fresh(t)
    const before = Date.now()
    const now = store.now()
    t.ok(Number.isInteger(now) && now >= before - 50 && now <= Date.now() + 50, `${now - before} ms from this process's clock`)
  })

  t.test('rate counters: a refund takes back one hit of the window, never below none; a reset forgets the key', async (t) => {
    const store = await fresh(t)
    const counter = store.rateCounter('a')
    await count(store, 'a', 'k', HOUR)
    await count(store, 'a', 'k', HOUR)
    await counter.refund('k')
    t.equal((await count(store, 'a', 'k', HOUR)).current, 2)
    await counter.refund('k')
    await counter.refund('k')
    await counter.refund('k')
    t.equal((await count(store, 'a', 'k', HOUR)).current, 1, 'refunds beyond the hits counted take back nothing more')
    await counter.refund('never-counted')
    t.equal((await count(store, 'a', 'never-counted', HOUR)).current, 1)
    await counter.reset('k')
    const afresh = await count(store, 'a', 'k', 100)
    t.same([afresh.current, afresh.ttl <= 100], [1, true], 'a new window, of the length the next hit asks')
  })
}
