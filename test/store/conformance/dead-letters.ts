// What every Store promises of the outbox's dead letters: kept, listed oldest first within their bytes, bounded,
// delivered again.
import { randomUUID } from 'node:crypto'
import type { Test } from 'tap'
import { DEAD_LETTERS } from '../../../src/domain/bounds.js'
import type { Announcement, Delivery } from '../../../src/store/store.js'
import { account, ADDED, announce, type FreshStore, HOUR, item, type OpenStore } from './fixtures.js'

export function deadLettersConformance (t: Test, fresh: FreshStore, open: OpenStore): void {
  t.test('outbox: a delivery given up is kept as a dead letter, listed oldest first, and delivered again as new, with its event id', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    for (let index = 0; index < 3; index += 1) await items.add(item(await account(users), { name: `item ${index}` }), announce(ADDED))
    const now = Date.now() + 1
    const taken = (await outbox.take('s', now, 3, HOUR)).deliveries
    for (const [index, delivery] of taken.entries()) t.equal(await outbox.deadLetter('s', delivery, `answered 50${index}`, now + index), 0, 'none pushed out')
    t.equal(await outbox.pending('s'), 0, 'a dead letter is no longer pending')
    t.equal(await outbox.deadLetter('s', taken[0]!, 'again', now), 0, 'one that has ended is not kept twice')
    const { deadLetters, total, next } = await outbox.deadLetters('s', { after: 0, limit: 2 })
    t.same([total, next], [3, 2], 'a next page after the second')
    t.same(deadLetters, taken.slice(0, 2).map(({ event, attempt }, index) => ({
      eventId: event.id, channel: event.channel, attempts: attempt, failure: `answered 50${index}`, failedAt: now + index, position: index + 1, eventBytes: Buffer.byteLength(event.body)
    })), 'oldest first, at most the limit, each with its attempts, failure, time, place and event\'s size, without the event')
    t.same(await outbox.deadLetters('s', { after: 2, limit: 2 }), { deadLetters: [{ ...deadLetters[0], eventId: taken[2]!.event.id, failure: 'answered 502', failedAt: now + 2, position: 3, eventBytes: Buffer.byteLength(taken[2]!.event.body) }], total: 3 },
      'the next page, the last')
    t.same(await outbox.deadLetters('s', { after: 0, limit: 0 }), { deadLetters: [], total: 3, next: 0 }, 'a limit of 0 lists none, only the total')
    t.same(await outbox.deadLetters('nobody', { after: 0, limit: 10 }), { deadLetters: [], total: 0 })

    t.equal(await outbox.redeliver('s', [taken[1]!.event.id, randomUUID()], now), 1, 'by event id; an unknown one is skipped')
    t.equal(await outbox.redeliver('s', [], now), 0, 'an empty list gives none back')
    const again = (await outbox.take('s', now, 10, HOUR)).deliveries
    t.same(again.map(({ event, attempt }) => [event, attempt]), [[taken[1]!.event, 1]], 'taken again as a first attempt, the same event')
    t.equal(await outbox.redeliver('s', undefined, now), 2, 'all the others')
    t.same((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 0)
    t.equal((await outbox.take('s', now, 10, HOUR)).deliveries.length, 2)
    t.equal(await outbox.redeliver('nobody', undefined, now), 0)
  })

  t.test(`outbox: a subscriber keeps at most ${DEAD_LETTERS} dead letters, the oldest out first`, async (t) => {
    const { users, items, outbox } = await fresh(t, DEAD_LETTERS + 1)
    await outbox.subscribe('s', [ADDED])
    const contributorId = await account(users)
    for (let index = 0; index <= DEAD_LETTERS; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    const taken = []
    // A take may hand out fewer than are due (Redis fans out events in batches).
    while (taken.length <= DEAD_LETTERS) taken.push(...(await outbox.take('s', now, DEAD_LETTERS + 1, HOUR)).deliveries)
    const pushedOut = []
    for (const delivery of taken) pushedOut.push(await outbox.deadLetter('s', delivery, 'answered 500', now))
    t.same(pushedOut.filter((count) => count > 0), [1], 'the last one pushed one out')
    const { deadLetters, total } = await outbox.deadLetters('s', { after: 0, limit: 1 })
    t.equal(total, DEAD_LETTERS)
    t.same(deadLetters.map((deadLetter) => deadLetter.eventId), [taken[1]!.event.id], 'the oldest went')
  })

  t.test('outbox: a page of dead letters carries their events when asked, within its bytes (its first whatever its size)', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    // Events of about 10, 30, 10 and 10 KiB, the second's in two-byte characters.
    const sized = (text: string): Announcement => (announced) => ({ id: randomUUID(), channel: ADDED, body: JSON.stringify({ item: announced, text }) })
    for (const text of ['a'.repeat(10_240), 'é'.repeat(15_360), 'b'.repeat(10_240), 'c'.repeat(10_240)]) await items.add(item(await account(users)), sized(text))
    const now = Date.now() + 1
    const taken: Delivery[] = []
    while (taken.length < 4) taken.push(...(await outbox.take('s', now, 4, HOUR)).deliveries)
    for (const delivery of taken) await outbox.deadLetter('s', delivery, 'answered 500', now)
    const bytes = taken.map(({ event }) => Buffer.byteLength(event.body))
    const page = async (after: number, bodyBytes: number): Promise<unknown[]> =>
      (await outbox.deadLetters('s', { after, limit: 10, bodyBytes })).deadLetters.map(({ eventId, eventBytes, body }) => [eventId, eventBytes, body])
    const listed = (index: number): unknown[] => [taken[index]!.event.id, bytes[index], taken[index]!.event.body]
    t.same(await page(0, bytes[0]! + bytes[1]!), [listed(0), listed(1)], 'as many as the bytes allow, each with its event')
    t.same(await page(0, bytes[0]! + bytes[1]! - 1), [listed(0)], 'not one whose event would pass them')
    t.same((await outbox.deadLetters('s', { after: 0, limit: 10, bodyBytes: bytes[0]! + bytes[1]! - 1 })).next, 1, 'and says where the rest begin')
    t.same(await page(1, 1), [listed(1)], 'the first of a page is listed whatever its size')
    t.same(await page(2, 1_000_000), [listed(2), listed(3)])
    t.same(await outbox.deadLetters('s', { after: 4, limit: 10 }), { deadLetters: [], total: 4 }, 'nothing after the last')
  })

  t.test('outbox: every dead letter is redelivered however many there are, in the order they were kept', async (t) => {
    const { users, items, outbox } = await fresh(t)
    await outbox.subscribe('s', [ADDED])
    const contributorId = await account(users)
    for (let index = 0; index < 250; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    const taken: Delivery[] = []
    while (taken.length < 250) taken.push(...(await outbox.take('s', now, 250, HOUR)).deliveries)
    for (const delivery of taken) await outbox.deadLetter('s', delivery, 'answered 500', now)
    const ids = taken.map(({ event }) => event.id)
    t.equal(await outbox.redeliver('s', [...ids.slice(0, 120), ...ids.slice(0, 120)], now), 120, 'given ids, in batches; one given twice goes once')
    t.equal(await outbox.redeliver('s', undefined, now), 130, 'all the rest')
    const again = []
    for (let batch = await outbox.take('s', now, 250, HOUR); batch.deliveries.length > 0; batch = await outbox.take('s', now, 250, HOUR)) again.push(...batch.deliveries)
    t.same(again.map(({ event }) => event.id).sort(), [...ids].sort(), 'each once')
  })

  t.test('outbox: dead letters are delivered again only while the subscriber\'s pending deliveries have room', async (t) => {
    const { users, items, outbox } = await open(t, { maxItemsPerContributor: 10, maxPendingDeliveries: 2 })
    await outbox.subscribe('s', [ADDED])
    const contributorId = await account(users)
    for (let index = 0; index < 2; index += 1) await items.add(item(contributorId), announce(ADDED))
    const now = Date.now() + 1
    for (const delivery of (await outbox.take('s', now, 2, HOUR)).deliveries) await outbox.deadLetter('s', delivery, 'answered 500', now)
    for (let index = 0; index < 2; index += 1) await items.add(item(contributorId), announce(ADDED))
    await outbox.take('s', now, 2, HOUR)
    t.equal(await outbox.pending('s'), 2, 'at the bound')
    t.equal(await outbox.redeliver('s', undefined, now), 0, 'no room: they stay')
    t.equal((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 2)
  })

  t.test('outbox: dead letters are delivered again only while the subscriber\'s pending deliveries\' events have room in bytes', async (t) => {
    // Each event about 1 100 bytes: two fit, a third does not.
    const { users, items, outbox } = await open(t, { maxItemsPerContributor: 10, maxPendingDeliveryBytes: 3000 })
    await outbox.subscribe('s', [ADDED])
    const contributorId = await account(users)
    for (let index = 0; index < 2; index += 1) await items.add(item(contributorId, { description: 'd'.repeat(1000) }), announce(ADDED))
    const now = Date.now() + 1
    for (const delivery of (await outbox.take('s', now, 2, HOUR)).deliveries) await outbox.deadLetter('s', delivery, 'answered 500', now)
    await items.add(item(contributorId, { description: 'd'.repeat(1000) }), announce(ADDED))
    await outbox.take('s', now, 1, HOUR)
    t.equal(await outbox.redeliver('s', undefined, now), 1, 'as many as the room takes')
    t.equal((await outbox.deadLetters('s', { after: 0, limit: 10 })).total, 1, 'the other stays')
    t.equal(await outbox.pending('s'), 2)
  })
}
