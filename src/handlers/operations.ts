import type { operations } from '../../generated/operations/openapi.js'
import type { DefaultedParameters, RouteOperationId } from '../../generated/operations/routes.js'
import { emailKey } from '../auth/email.js'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { InvalidRequestError, journalWaitsRefused, notFound, sandboxesOff, sandboxLimitReached } from '../errors.js'
import { journalMatches } from '../domain/journal.js'
import { SANDBOX_CLOCK_AHEAD_YEARS } from '../domain/sandboxes.js'
import { type Sandbox, sandboxCapacityBytes, type Sandboxes } from '../store/sandboxes.js'
import { itemFields } from '../domain/serialized.js'
import type { DeadLetter } from '../store/store.js'
import { readSubscription, subscriberName } from '../webhooks/subscriptions.js'
import type { ContractHandler } from './handler.js'

type OperationsHandler<Id extends RouteOperationId> = ContractHandler<operations[Id], DefaultedParameters[Id]>

/** One handler per operation of the operations API (ops/openapi.yaml): a missing or extra one does not compile. */
export type OperationsHandlers = { [Id in RouteOperationId]: OperationsHandler<Id> }

type OperationsBody<Id extends RouteOperationId, Status extends keyof operations[Id]['responses']> =
  operations[Id]['responses'][Status] extends { content: { 'application/json': infer Body } } ? Body : never

type DeadLetterBody = operations['listDeadLetters']['responses'][200]['content']['application/json']['subscribers'][number]['deadLetters'][number]

export const getMetrics: OperationsHandler<'getMetrics'> = async (request, reply) => {
  const { contentType, text } = await request.server.metrics.exposition()
  return await reply.type(contentType).code(200).send(text)
}

/** The configured subscribers the request names: the one of `subscriber`, or all when it is left out. */
function selected (subscribers: ReadonlyMap<string, string>, subscriber: string | undefined): Array<[name: string, id: string]> {
  if (subscriber === undefined) return [...subscribers]
  const id = subscribers.get(subscriber)
  if (id === undefined) throw notFound(`Webhook subscriber ${subscriber}`)
  return [[subscriber, id]]
}

// Bytes of events one answer carries at most (beside each subscriber's first, whatever its size), so that an answer
// stays small however large the events and however many the subscribers.
const EVENT_BYTES_PER_ANSWER = 256 * 1024

const deadLetterBody = ({ eventId, channel, attempts, failure, failedAt, eventBytes, body }: DeadLetter): DeadLetterBody => {
  const listed = { eventId, channel, attempts, failure, failedAt: new Date(failedAt).toISOString(), eventBytes }
  return body === undefined ? listed : { ...listed, event: JSON.parse(body) as Record<string, unknown> }
}

export const listDeadLetters: OperationsHandler<'listDeadLetters'> = async (request, reply) => {
  const { outbox } = request.server.store
  const { subscriber, limit, after, events } = request.query
  // A position is a subscriber's own: it means nothing to the others.
  if (after !== undefined && subscriber === undefined) throw new InvalidRequestError([{ field: 'after', issue: 'requires subscriber' }])
  let bodyBytes = events ? EVENT_BYTES_PER_ANSWER : undefined
  const subscribers = []
  // One subscriber after the other: each page takes what is left of the answer's bytes of events.
  for (const [name, id] of selected(request.server.webhookSubscribers, subscriber)) {
    const { deadLetters, total, next } = await outbox.deadLetters(id, { after: Number(after ?? 0), limit, bodyBytes })
    if (bodyBytes !== undefined) for (const { eventBytes } of deadLetters) bodyBytes -= eventBytes
    const listed = { subscriber: name, total, deadLetters: deadLetters.map(deadLetterBody) }
    subscribers.push(next === undefined ? listed : { ...listed, next: String(next) })
  }
  return await reply.code(200).send({ subscribers })
}

export const redeliverDeadLetters: OperationsHandler<'redeliverDeadLetters'> = async (request, reply) => {
  const { outbox } = request.server.store
  const now = request.server.store.now()
  const counts = await Promise.all(selected(request.server.webhookSubscribers, request.body.subscriber).map(async ([, id]) =>
    await outbox.redeliver(id, request.body.eventIds, now)))
  return await reply.code(200).send({ redelivered: counts.reduce((sum, count) => sum + count, 0) })
}

export const listAccounts: OperationsHandler<'listAccounts'> = async (request, reply) => {
  const { limit, before, email } = request.query
  const page = await request.server.store.accounts.list(before === undefined ? undefined : Number(before), limit, email === undefined ? undefined : emailKey(email))
  const accounts = page.accounts.map(({ user: { id, email, role, createdAt }, heldBytes, items }) => ({ id, email, role, createdAt, heldBytes, items }))
  return await reply.code(200).send(page.next === undefined ? { accounts } : { accounts, next: String(page.next) })
}

// Items an account's removal reads at a time, and removes one by one, each with its event.
const ITEMS_PER_PAGE = 100

export const removeAccount: OperationsHandler<'removeAccount'> = async (request, reply) => {
  const { store, events } = request.server
  const { accountId } = request.params
  // The user first: its sessions end, so that no request of the account's adds an item while its items go.
  const userRemoved = await store.accounts.remove(accountId)
  let itemsRemoved = 0
  for (;;) {
    const { items } = await store.items.page(0, ITEMS_PER_PAGE, { contributorId: accountId })
    if (items.length === 0) break
    for (const item of items) {
      const announce = events.announce('items.item.removed', accountId, store, request)
      if (await store.items.remove(itemFields(item).id, () => {}, announce) !== undefined) itemsRemoved += 1
    }
  }
  request.log.info({ audit: 'removeAccount', accountId, userRemoved, itemsRemoved }, 'account removed')
  return await reply.code(204).send()
}

function sandboxesOf (request: FastifyRequest): Sandboxes {
  const { sandboxes } = request.server
  if (sandboxes === null) throw sandboxesOff()
  return sandboxes
}

// The sandbox as the operations API answers it.
function sandboxBody (sandboxes: Sandboxes, { id }: Sandbox): OperationsBody<'createSandbox', 201> {
  return { id, basePath: `/sandboxes/${id}`, idleSeconds: Math.ceil(sandboxes.settings.idleMs / 1000), capacityBytes: sandboxCapacityBytes(sandboxes.settings) }
}

// A seed checked and its passwords hashed (the seed plugin's prepareSeed).
type PreparedSeed = Awaited<ReturnType<FastifyInstance['prepareSeed']>>

// A fixture at fault is the request's 400, naming it (`users[0].email`).
function fixtureAtFault (error: unknown): unknown {
  if (!(error instanceof Error && error.name === 'SeedError')) return error
  const [, field = 'body', issue = error.message] = /^([^:\s]+): (.*)$/.exec(error.message) ?? []
  return new InvalidRequestError([{ field, issue }])
}

// Puts the sandbox's fixtures in (a fixture the store refuses is a 400 naming it). On any failure a sandbox just
// created is abandoned (its caller never learnt its id), and one reset is kept, for the reset tried again (the store
// out of reach) or its deletion.
async function seeded (request: FastifyRequest, sandboxes: Sandboxes, sandbox: Sandbox, fixtures: PreparedSeed, after: 'create' | 'reset'): Promise<void> {
  try {
    await request.server.seedStore(sandbox.store, fixtures)
  } catch (error) {
    if (after === 'create') await sandboxes.abandon(sandbox.id)
    throw fixtureAtFault(error)
  }
}

export const listSandboxes: OperationsHandler<'listSandboxes'> = async (request, reply) => {
  const sandboxes = sandboxesOf(request)
  const { limit, after } = request.query
  const [page, total] = await Promise.all([sandboxes.list(after, limit), sandboxes.count()])
  const capacityBytes = sandboxCapacityBytes(sandboxes.settings)
  const listed = page.sandboxes.map(({ id, createdAt, usedAt, heldBytes }) => ({
    id,
    ...(createdAt === undefined ? {} : { createdAt: new Date(createdAt).toISOString() }),
    lastUsedAt: new Date(usedAt).toISOString(),
    heldBytes,
    capacityBytes
  }))
  const body = { sandboxes: listed, total, limit: sandboxes.settings.limit }
  return await reply.code(200).send(page.next === undefined ? body : { ...body, next: page.next })
}

// The fixtures are checked and their passwords hashed before the sandbox is made: what it keeps for its resets holds
// no password in the clear.
export const createSandbox: OperationsHandler<'createSandbox'> = async (request, reply) => {
  const sandboxes = sandboxesOf(request)
  const fixtures = await request.server.prepareSeed(request.body).catch((error: unknown) => { throw fixtureAtFault(error) })
  const sandbox = await sandboxes.create(fixtures)
  if (sandbox === undefined) throw sandboxLimitReached(sandboxes.settings.limit)
  await seeded(request, sandboxes, sandbox, fixtures, 'create')
  request.log.info({ audit: 'createSandbox', sandboxId: sandbox.id }, 'sandbox created')
  return await reply.code(201).send(sandboxBody(sandboxes, sandbox))
}

export const resetSandbox: OperationsHandler<'resetSandbox'> = async (request, reply) => {
  const sandboxes = sandboxesOf(request)
  const reset = await sandboxes.reset(request.params.sandboxId)
  if (reset === undefined) throw notFound('Sandbox')
  await seeded(request, sandboxes, reset.sandbox, await request.server.keptSeed(reset.fixtures), 'reset')
  request.log.info({ audit: 'resetSandbox', sandboxId: reset.sandbox.id }, 'sandbox reset')
  return await reply.code(200).send(sandboxBody(sandboxes, reset.sandbox))
}

export const deleteSandbox: OperationsHandler<'deleteSandbox'> = async (request, reply) => {
  const { sandboxId } = request.params
  if (!await sandboxesOf(request).delete(sandboxId)) throw notFound('Sandbox')
  request.log.info({ audit: 'deleteSandbox', sandboxId }, 'sandbox deleted')
  return await reply.code(204).send()
}

export const advanceSandboxClock: OperationsHandler<'advanceSandboxClock'> = async (request, reply) => {
  const { sandboxId } = request.params
  const clock = await sandboxesOf(request).advanceClock(sandboxId, request.body.seconds * 1000)
  if (clock === undefined) throw notFound('Sandbox')
  if (clock === 'too far') {
    throw new InvalidRequestError([{ field: 'body.seconds', issue: `would move the clock more than ${SANDBOX_CLOCK_AHEAD_YEARS} years ahead of the service's` }])
  }
  request.log.info({ audit: 'advanceSandboxClock', sandboxId, aheadMs: clock.aheadMs }, 'sandbox clock advanced')
  return await reply.code(200).send({ now: new Date(clock.now).toISOString(), aheadSeconds: Math.floor(clock.aheadMs / 1000) })
}

export const setSandboxWebhook: OperationsHandler<'setSandboxWebhook'> = async (request, reply) => {
  const { sandboxId } = request.params
  const receiver = readSubscription(request.body)
  if ('issue' in receiver) throw new InvalidRequestError([{ field: ['body', ...receiver.path].join('.'), issue: receiver.issue }])
  if (!await sandboxesOf(request).setReceiver(sandboxId, { url: receiver.url, secret: receiver.secret })) throw notFound('Sandbox')
  request.log.info({ audit: 'setSandboxWebhook', sandboxId, receiver: subscriberName(receiver.url) }, 'sandbox webhook set')
  return await reply.code(204).send()
}

export const deleteSandboxWebhook: OperationsHandler<'deleteSandboxWebhook'> = async (request, reply) => {
  const { sandboxId } = request.params
  if (!await sandboxesOf(request).setReceiver(sandboxId, undefined)) throw notFound('Sandbox')
  request.log.info({ audit: 'deleteSandboxWebhook', sandboxId }, 'sandbox webhook deleted')
  return await reply.code(204).send()
}

export const listSandboxEvents: OperationsHandler<'listSandboxEvents'> = async (request, reply) => {
  const { after, limit } = request.query
  const listed = await sandboxesOf(request).events(request.params.sandboxId, after, limit)
  if (listed === undefined) throw notFound('Sandbox')
  const events = listed.map(({ sequence, body }) => ({ sequence, event: JSON.parse(body) as Record<string, unknown> }))
  return await reply.code(200).send(listed.length === limit ? { events, next: listed.at(-1)!.sequence } : { events })
}

// A page of the journal answers the entries that match, and where the next begins: past the last one listed, else
// at `after` again (the contract's empty page).
export const listSandboxJournal: OperationsHandler<'listSandboxJournal'> = async (request, reply) => {
  const { sandboxId } = request.params
  const { after, limit, waitSeconds, ...filter } = request.query
  const sandboxes = sandboxesOf(request)
  const wait = waitSeconds === 0 ? undefined : request.server.journalWaits?.hold(sandboxId.toLowerCase())
  if (wait === 'per key' || wait === 'in all') throw journalWaitsRefused(wait)
  const until = performance.now() + waitSeconds * 1000
  let readFrom = after
  let timer: NodeJS.Timeout | undefined
  try {
    for (;;) {
      // Asked before reading: a change made while the read is on its way ends the wait that follows it.
      const changed = wait?.changed()
      const kept = await sandboxes.journal(sandboxId, readFrom)
      if (kept === undefined) throw notFound('Sandbox')
      const { entries, lookedAt } = journalMatches(kept, filter, limit)
      const left = until - performance.now()
      if (wait === undefined || entries.length > 0 || left <= 0 || wait.ended()) return await reply.code(200).send({ entries, next: entries.at(-1)?.position ?? after })
      readFrom = lookedAt ?? readFrom
      await Promise.race([changed, new Promise((resolve) => { timer = setTimeout(resolve, left) })])
      clearTimeout(timer)
    }
  } finally {
    clearTimeout(timer)
    wait?.release()
  }
}

/** Every operation of the operations API, by operationId. */
export const operationsHandlers: OperationsHandlers = {
  getMetrics, listDeadLetters, redeliverDeadLetters, listAccounts, removeAccount, listSandboxes, createSandbox, resetSandbox, deleteSandbox, advanceSandboxClock, setSandboxWebhook, deleteSandboxWebhook, listSandboxEvents, listSandboxJournal
}
