import type { Principal } from '../auth/principal.js'
import { forbidden, itemQuotaExceeded, notFound, preconditionFailed } from '../errors.js'
import { newItem } from '../domain/records.js'
import { serializedItemList, TEXT } from '../domain/serialized.js'
import type { Item } from '../domain/index.js'
import { isoTimestamp } from '../runtime/timestamps.js'
import type { Handler } from './handler.js'

/** An item's strong entity tag: updatedAt increases with every edit of an item, so it names each of its versions. */
const entityTag = (item: Pick<Item, 'updatedAt'>): string => `"${item.updatedAt}"`

/** Where an item is read: its getItem URL. */
const itemLocation = (item: Item): string => `/v1/items/${item.id}`

function assertOwner (caller: Principal, item: Item): void {
  if (item.contributorId !== caller.id) throw forbidden('Only the item\'s contributor may change it.')
}

// Whether an If-Match or If-None-Match list names the item's tag (RFC 9110 §13.1): `*` names any; a weak tag
// (W/"…") names it only when compared weakly, as If-None-Match does.
function namesTag (header: string, tag: string, weakly: boolean): boolean {
  return header.split(',').some((entry) => {
    const candidate = entry.trim()
    return candidate === '*' || candidate === tag || (weakly && candidate === `W/${tag}`)
  })
}

function assertUnchanged (ifMatch: string | undefined, current: Item): void {
  if (ifMatch !== undefined && !namesTag(ifMatch, entityTag(current), false)) throw preconditionFailed()
}

// updatedAt must strictly increase on every edit, even two edits within one millisecond, so an item edited more often
// than that runs ahead of the clock. Timestamps compare as text in time order (four-digit years), so the previous
// one is parsed only when the clock has not passed it.
function nextTimestamp (previous: string, nowMs: number): string {
  const now = isoTimestamp(nowMs)
  return now > previous ? now : isoTimestamp(Date.parse(previous) + 1)
}

// Items are sent as the texts the store keeps (src/domain/serialized.ts), which Fastify sends as they are once told they
// are JSON.
const JSON_CONTENT = 'application/json; charset=utf-8'

export const listItems: Handler<'listItems'> = async (request, reply) => {
  const { page, pageSize, status, contributorId } = request.query
  const { items, total } = await request.store.items.page((page - 1) * pageSize, pageSize, { status, contributorId })
  return reply.header('content-type', JSON_CONTENT).code(200).send(serializedItemList(items, { page, pageSize, total }))
}

export const createItem: Handler<'createItem'> = async (request, reply) => {
  const made = newItem(request.body, request.user.id, request.store.now())
  const item = await request.store.items.add(made, request.server.events.announce('items.item.added', request.user.id, request.store, request),
    request.idempotencyKey ?? undefined, request.writeLimit ?? undefined)
  if (item === undefined) throw itemQuotaExceeded()
  // A retry with the same Idempotency-Key (src/pipeline/idempotency.ts) gets the item its first create made, answered
  // as that create was.
  if (item.id !== made.id) reply.header('idempotent-replayed', 'true')
  return reply.header('location', itemLocation(item)).header('etag', entityTag(item)).header('content-type', JSON_CONTENT).code(201).send(item[TEXT])
}

export const getItem: Handler<'getItem'> = async (request, reply) => {
  const item = await request.store.items.get(request.params.itemId)
  if (item === undefined) throw notFound('Item')
  const tag = entityTag(item)
  reply.header('etag', tag)
  const ifNoneMatch = request.headers['if-none-match']
  if (ifNoneMatch !== undefined && namesTag(ifNoneMatch, tag, true)) return reply.code(304).send()
  return reply.header('content-type', JSON_CONTENT).code(200).send(item[TEXT])
}

export const updateItem: Handler<'updateItem'> = async (request, reply) => {
  const updated = await request.store.items.update(request.params.itemId, (current) => {
    assertOwner(request.user, current)
    assertUnchanged(request.headers['if-match'], current)
    return { ...current, ...request.body, updatedAt: nextTimestamp(current.updatedAt, request.store.now()) }
  }, request.server.events.announce('items.item.edited', request.user.id, request.store, request), request.writeLimit ?? undefined)
  if (updated === undefined) throw notFound('Item')
  return reply.header('etag', entityTag(updated)).header('content-type', JSON_CONTENT).code(200).send(updated[TEXT])
}

export const deleteItem: Handler<'deleteItem'> = async (request, reply) => {
  const removed = await request.store.items.remove(request.params.itemId, (current) => {
    assertOwner(request.user, current)
    assertUnchanged(request.headers['if-match'], current)
  }, request.server.events.announce('items.item.removed', request.user.id, request.store, request), request.writeLimit ?? undefined)
  if (removed === undefined) throw notFound('Item')
  return reply.code(204).send()
}
