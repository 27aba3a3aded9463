import { randomUUID } from 'node:crypto'
import type { Principal } from '../auth/principal.js'
import { forbidden, itemQuotaExceeded, notFound } from '../errors.js'
import type { Item } from '../store/store.js'
import type { Handler } from './handler.js'

function assertOwner (caller: Principal, item: Item): void {
  if (item.contributorId !== caller.id) throw forbidden('Only the item\'s contributor may change it.')
}

// updatedAt must strictly increase on every edit, even two edits within one millisecond.
const nextTimestamp = (previous: string): string =>
  new Date(Math.max(Date.now(), Date.parse(previous) + 1)).toISOString()

export const listItems: Handler<'listItems'> = async (request, reply) => {
  const { page, pageSize } = request.query
  const { items, total } = await request.server.store.items.page((page - 1) * pageSize, pageSize)
  return reply.code(200).send({ data: items, pagination: { page, pageSize, total } })
}

export const createItem: Handler<'createItem'> = async (request, reply) => {
  const now = new Date().toISOString()
  const item = await request.server.store.items.add({
    id: randomUUID(),
    name: request.body.name,
    description: request.body.description ?? null,
    status: 'active',
    contributorId: request.user.id,
    createdAt: now,
    updatedAt: now
  })
  if (item === undefined) throw itemQuotaExceeded()
  request.server.events.emit('items.item.added', item.id, { item, actorId: request.user.id })
  return reply.header('location', `/v1/items/${item.id}`).code(201).send(item)
}

export const getItem: Handler<'getItem'> = async (request, reply) => {
  const item = await request.server.store.items.get(request.params.itemId)
  if (item === undefined) throw notFound('Item')
  return reply.code(200).send(item)
}

export const updateItem: Handler<'updateItem'> = async (request, reply) => {
  const updated = await request.server.store.items.update(request.params.itemId, (current) => {
    assertOwner(request.user, current)
    return { ...current, ...request.body, updatedAt: nextTimestamp(current.updatedAt) }
  })
  if (updated === undefined) throw notFound('Item')
  request.server.events.emit('items.item.edited', updated.id, { item: updated, actorId: request.user.id })
  return reply.code(200).send(updated)
}

export const deleteItem: Handler<'deleteItem'> = async (request, reply) => {
  const removed = await request.server.store.items.remove(request.params.itemId, (current) => {
    assertOwner(request.user, current)
  })
  if (removed === undefined) throw notFound('Item')
  request.server.events.emit('items.item.removed', removed.id, { item: removed, actorId: request.user.id })
  return reply.code(204).send()
}
