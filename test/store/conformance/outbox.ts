// What every Store promises of the outbox: one event per stored change, for each subscriber of its channel, leased
// deliveries, retries in their order, bounded pending deliveries.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import type { Item } from '../../../src/domain/index.js'
import { DEAD_LETTER_BYTES } from '../../../src/domain/bounds.js'
import type { Announcement, Delivery, OutboxEvent } from '../../../src/store/store.js'
import { account, ADDED, announce, bodies, EDITED, type FreshStore, HOUR, item, type OpenStore, REMOVED } from './fixtures.js'

export function outboxConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('outbox: each stored change records one event, for every subscriber of its channel; a change not stored records none', async (t) => {
    const { users, items, outbox } = await fresh(t, 1)
    await outbox.subscribe('adds-and-removals', [ADDED, REMOVED])
    await outbox.subscribe('edits', [EDITED])
    const recorded: OutboxEvent[] = []
    outbox.onRecorded((event) => { recorded.push(event) })
    const contributorId = await account(users)
    const added = await items.add(item(contributorId), announce(ADDED))
    t.equal(await items.add(item(contributorId), announce(ADDED)), undefined, 'over the quota: no event')
    await items.add(item(await account(users)))
    await t.rejects(items.update(added!.id, () => { throw new Error('not yours') }, announce(EDITED)))
    const edited = await items.update(added!.id, (current) => ({ ...current, name: 'edited' }), announce(EDITED))
    await items.update(randomUUID(), (current) => current, announce(EDITED))
    await t.rejects(items.remove(added!.id, () => { throw new Error('not yours') }, announce(REMOVED)))
    const removed = await items.remove(added!.id, () => {}, announce(REMOVED))
    await outbox.subscribe('adds-and-removals', [ADDED, REMOVED])

    const now = Date.now() + 1
    const first = await outbox.take('adds-and-removals', now, 10, HOUR)
    t.same(bodies(first.deliveries), [{ channel: ADDED, item: added }, { channel: REMOVED, item: removed }])
    t.same(first.deliveries.map((delivery) => delivery.attempt), [1, 1], 'subscribing again (another instance starts) changes nothing')
    t.equal(first.dropped, 0)
    t.same(bodies((await outbox.take('edits', now, 10, HOUR)).deliveries), [{ channel: EDITED, item: edited }])
    t.same(recorded.map((event) => JSON.parse(event.body)), [{ channel: ADDED, item: added }, { channel: EDITED, item: edited }, { channel: REMOVED, item: removed }],
      'this process hears of each stored event, once')
    t.same((await outbox.take('nobody', now, 10, HOUR)).deliveries, [], 'an unknown subscriber has nothing')
  })

  t.test('outbox: a delivery is leased to its taker; settled it ends, given a retry time it waits for it, unsettled it is taken again when its lease ends', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(await account(users), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = await outbox.take('s', now, 2, 1000)
    t.same(bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), ['item 0', 'item 1'], 'oldest first, at most the limit')
    t.same((await outbox.take('s', now, 10, 1000)).deliveries.map((delivery) => delivery.attempt), [1], 'the leased ones are not taken again')
    t.equal(await outbox.pending('s'), 3)
    const [delivered, retried] = taken.deliveries
    await outbox.settle('s', delivered!)
    await outbox.settle('s', retried!, now + 5000)
    t.equal(await outbox.pending('s'), 2)
    t.same((await outbox.take('s', now + 999, 10, 1000)).deliveries.map(({ event, attempt }) => [event.id, attempt]), [],
      'the retry waits; the third is still leased')
    const later = await outbox.take('s', now + 5000, 10, 1000)
    t.same(later.deliveries.map(({ event, attempt }) => [event.id, attempt]).sort(),
      [[retried!.event.id, 2], [later.deliveries.find((one) => one.event.id !== retried!.event.id)!.event.id, 2]].sort(),
      'the retry at its time, and the unsettled one after its lease: each as a second attempt')
    for (const delivery of later.deliveries) await outbox.settle('s', delivery)
    t.equal(await outbox.pending('s'), 0)
    await outbox.settle('s', delivered!)
    await outbox.settle('s', delivered!, now)
    t.equal(await outbox.pending('s'), 0, 'settling an ended delivery again changes nothing')
    t.equal(await outbox.pending('nobody'), 0)
  })

  t.test('outbox: an event\'s traceparent stays with each of its deliveries: retried, dead-lettered and delivered again', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const traceparent = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`
    const traced: Announcement = (announced) => ({ ...announce(ADDED)(announced), traceparent })
    await items.add(item(await account(users), { name: 'traced' }), traced)
    await items.add(item(await account(users), { name: 'untraced' }), announce(ADDED))
    const now = Date.now() + 1
    // By name: deliveries due at one time may come in any order.
    const traceparents = (deliveries: ReadonlyArray<{ event: OutboxEvent }>): unknown[] => deliveries.map(({ event }) => [(JSON.parse(event.body) as { item: Item }).item.name, event.traceparent])
      .sort(([a], [b]) => String(a).localeCompare(String(b)))
    const taken = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(taken), [['traced', traceparent], ['untraced', undefined]])
    for (const delivery of taken) await outbox.settle('s', delivery, now)
    const retried = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(retried), [['traced', traceparent], ['untraced', undefined]], 'on a retry')
    for (const delivery of retried) await outbox.deadLetter('s', delivery, 'answered 500', now)
    await outbox.redeliver('s', undefined, now)
    const redelivered = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(traceparents(redelivered), [['traced', traceparent], ['untraced', undefined]], 'delivered again')
  })

  t.test(`outbox: a subscriber's dead letters keep at most ${DEAD_LETTER_BYTES} bytes of events, the oldest out first`, async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const large: Announcement = (announced) => ({ id: randomUUID(), channel: ADDED, body: JSON.stringify({ item: announced, text: 'x'.repeat(DEAD_LETTER_BYTES / 4) }) })
    const taken: Delivery[] = []
    const pushedOut = []
    // One at a time: pending, they would pass the memory outbox's own bound.
    for (let index = 0; index < 5; index += 1) {
      await items.add(item(await account(users)), large)
      const [delivery] = (await outbox.take('s', Date.now() + 1, 1, HOUR)).deliveries
      taken.push(delivery!)
      pushedOut.push(await outbox.deadLetter('s', delivery!, 'answered 500', Date.now()))
    }
    t.same(pushedOut, [0, 0, 0, 1, 1], 'each past three a quarter of the bound and more pushes the oldest out')
    const { deadLetters, total } = await outbox.deadLetters('s', { after: 0, limit: 10 })
    t.same([total, deadLetters.map(({ eventId }) => eventId)], [3, taken.slice(2).map(({ event }) => event.id)])
    const now = Date.now() + 1
    t.equal(await outbox.redeliver('s', [taken[2]!.event.id], now), 1, 'redelivered, one leaves the bound')
    const [again] = (await outbox.take('s', now, 1, HOUR)).deliveries
    t.equal(await outbox.deadLetter('s', again!, 'answered 500', now), 0, 'and comes back within it')
    t.equal((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 3)
  })

  t.test('outbox: retries come back soonest first, each at its time', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 5; index += 1) await items.add(item(await account(users), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = (await outbox.take('s', now, 5, HOUR)).deliveries
    const waits = [10, 30, 20, 40, 5]
    for (const [index, delivery] of taken.entries()) await outbox.settle('s', delivery, now + (waits[index] ?? 0))
    const names = async (at: number): Promise<string[]> =>
      bodies((await outbox.take('s', at, 10, HOUR)).deliveries).map((body) => (body as { item: Item }).item.name)
    t.same(await names(now + 25), ['item 4', 'item 0', 'item 2'], 'those due by then, soonest first')
    t.same(await names(now + 50), ['item 1', 'item 3'])
  })

  t.test('outbox: a take hands out at most its limit, whatever is due', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(await account(users)), announce(ADDED))
    const now = Date.now() + 1
    t.equal((await outbox.take('s', now, 3, 10)).deliveries.length, 3)
    t.same((await outbox.take('s', now + 10, 1, 10)).deliveries.map((delivery) => delivery.attempt), [2], 'one of the three whose lease ended')
    t.equal((await outbox.take('s', now + 10, 5, 10)).deliveries.length, 2, 'then the other two')
  })

  t.test('outbox: a subscriber keeps a bounded number of deliveries; past it, new events are dropped and counted once', async (t) => {
    const { users, items, outbox } = await open(t, { maxItemsPerContributor: 1000, maxPendingDeliveries: 3 })
    await outbox.subscribe('slow', [ADDED])
    for (let index = 0; index < 5; index += 1) await items.add(item(await account(users), { name: `item ${index}` }), announce(ADDED))
    const taken = await outbox.take('slow', Date.now() + 1, 10, HOUR)
    t.same(bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), ['item 0', 'item 1', 'item 2'], 'those already waiting keep their place')
    t.equal(taken.dropped, 2)
    t.equal((await outbox.take('slow', Date.now() + 1, 10, HOUR)).dropped, 0, 'counted once')
  })

  t.test('outbox: a subscriber keeps its deliveries within a bound on their events\' text too; past it, new events are dropped, and room comes back as they end', async (t) => {
    // Each event about 1 100 characters (bytes): two fit, a third does not.
    const { users, items, outbox } = await open(t, { maxItemsPerContributor: 1000, maxPendingDeliveryBytes: 3000 })
    await outbox.subscribe('slow', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(await account(users), { name: `item ${index}`, description: 'd'.repeat(1000) }), announce(ADDED))
    const taken = await outbox.take('slow', Date.now() + 1, 10, HOUR)
    t.same(bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), ['item 0', 'item 1'], 'those already waiting keep their place')
    t.equal(taken.dropped, 1)
    await outbox.settle('slow', taken.deliveries[0]!)
    await items.add(item(await account(users), { name: 'after one ended', description: 'd'.repeat(1000) }), announce(ADDED))
    const next = await outbox.take('slow', Date.now() + 1, 10, HOUR)
    t.same([bodies(next.deliveries).map((body) => (body as { item: Item }).item.name), next.dropped], [['after one ended'], 0], 'a delivery ended makes room')
  })

  t.test('outbox: the bound on pending deliveries\' events is in bytes, whatever characters make them', async (t) => {
    // Each event about 1 100 characters, in about 2 100 bytes (UTF-8 takes two for each 'é'): two fit in characters, one in bytes.
    const { users, items, outbox } = await open(t, { maxItemsPerContributor: 1000, maxPendingDeliveryBytes: 3000 })
    await outbox.subscribe('slow', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(await account(users), { name: `item ${index}`, description: 'é'.repeat(1000) }), announce(ADDED))
    const taken = await outbox.take('slow', Date.now() + 1, 10, HOUR)
    const [event] = taken.deliveries.map((delivery) => delivery.event)
    t.ok(event !== undefined && event.body.length < 1500 && Buffer.byteLength(event.body) > 2000, 'an event of fewer characters than bytes')
    t.same([bodies(taken.deliveries).map((body) => (body as { item: Item }).item.name), taken.dropped], [['item 0'], 2])
  })
}
