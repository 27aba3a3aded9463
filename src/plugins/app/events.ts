import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { webhooks } from '../../../generated/openapi.js'
import { schemas } from '../../../generated/schemas.js'
import type { CausedEvent } from '../../domain/journal.js'
import type { Announcement, OutboxEvent, ServingStore } from '../../store/store.js'
import { isoTimestamp } from '../../runtime/timestamps.js'
import { randomUuid } from '../../runtime/uuid.js'

/** The channels are the contract's webhooks; an event is the CloudEvents envelope declared there. */
export type Channel = keyof webhooks
export type DomainEvent<C extends Channel> =
  webhooks[C]['post']['requestBody']['content']['application/cloudevents+json']
export type EventHandler<C extends Channel> = (event: DomainEvent<C>) => void | Promise<void>
export type Subscribers = { [C in Channel]?: ReadonlyArray<EventHandler<C>> }

/** The request a change is made for: its id, which the change's event names, and the events it caused, once recorded. */
export interface CausingRequest {
  readonly id: string
  causedEvents: CausedEvent[] | null
}

export interface EventBus {
  on<C extends Channel>(channel: C, handler: EventHandler<C>): void
  off<C extends Channel>(channel: C, handler: EventHandler<C>): void
  /**
   * How a change on `channel` by `actorId` in `store`, made for `request`, announces itself: the store records the
   * event it builds with the change, one event however many times the change is tried. For the app's own store,
   * undefined while nothing would receive the event (no webhook and no handler of this process subscribes); any
   * other (a sandbox's) keeps every event, to be read back.
   */
  announce<C extends Channel>(channel: C, actorId: string, store: ServingStore, request: CausingRequest): Announcement | undefined
}

declare module 'fastify' {
  interface FastifyInstance {
    events: EventBus
  }
  interface FastifyRequest {
    /** The events the store recorded with the request's change (a sandbox's journal names them); null before any. */
    causedEvents: CausedEvent[] | null
  }
}

// The constant fields of every event's envelope, as the contract's ItemEvent schema fixes them.
const { specversion, source, datacontenttype } = schemas.ItemEvent.properties

interface EventsPluginOptions {
  /** In-process handlers to subscribe before the first request, by channel. */
  subscribers?: Subscribers
  /** The channels that webhooks subscribe to: their events are recorded even with no handler in this process. */
  webhookChannels: ReadonlySet<Channel>
}

/**
 * Builds each change's event and hands the ones this process records to its in-process handlers, once the
 * response has been sent. Webhooks take theirs from the store's outbox (the webhooks plugin).
 */
async function eventsPlugin (app: FastifyInstance, options: EventsPluginOptions): Promise<void> {
  const handlers = new Map<Channel, Set<EventHandler<Channel>>>()
  const deliveries = new Set<Promise<void>>()
  // The request each event was built for. A store may build the event of a change it then does not make (a create
  // answered with the one its Idempotency-Key recorded, a write refused), so a request caused only the events its
  // store tells it recorded: each store's outbox is heard once, from the first event built for it.
  const causes = new WeakMap<OutboxEvent, { readonly request: CausingRequest, readonly caused: CausedEvent }>()
  const heard = new WeakSet<ServingStore['outbox']>()
  const hear = (outbox: ServingStore['outbox']): void => {
    if (heard.has(outbox)) return
    heard.add(outbox)
    outbox.onRecorded((event) => {
      const cause = causes.get(event)
      if (cause !== undefined) (cause.request.causedEvents ??= []).push(cause.caused)
    })
  }

  const deliver = async (handler: EventHandler<Channel>, event: DomainEvent<Channel>): Promise<void> => {
    try {
      await handler(event)
    } catch (err) {
      app.log.error({ err, channel: event.type, eventId: event.id }, 'event handler failed')
    }
  }

  const bus: EventBus = {
    on (channel, handler) {
      const registered = handlers.get(channel) ?? new Set()
      registered.add(handler as EventHandler<Channel>)
      handlers.set(channel, registered)
    },
    off (channel, handler) {
      handlers.get(channel)?.delete(handler as EventHandler<Channel>)
    },
    announce (channel, actorId, store, request) {
      if (store === app.store && !options.webhookChannels.has(channel) && (handlers.get(channel)?.size ?? 0) === 0) return undefined
      const traceparent = app.tracing.traceparent()
      const id = randomUuid()
      hear(store.outbox)
      return (item): OutboxEvent => {
        const event: DomainEvent<typeof channel> = {
          specversion: specversion.const,
          id,
          source: source.const,
          type: channel,
          time: isoTimestamp(store.now()),
          subject: item.id,
          datacontenttype: datacontenttype.const,
          requestid: request.id,
          data: { item, actorId }
        }
        const built: OutboxEvent = traceparent === undefined ? { id, channel, body: JSON.stringify(event) } : { id, channel, body: JSON.stringify(event), traceparent }
        causes.set(built, { request, caused: { id, type: channel } })
        return built
      }
    }
  }

  app.store.outbox.onRecorded(({ channel, body }) => {
    const targets = [...(handlers.get(channel as Channel) ?? [])]
    if (targets.length === 0) return
    // setImmediate runs after the reply has been written, so no handler can delay or change the response. Each
    // handler gets a copy of its own, so none can change what another sees.
    const delivery = new Promise<void>((resolve) => setImmediate(resolve))
      .then(async () => { await Promise.all(targets.map(async (handler) => await deliver(handler, JSON.parse(body)))) })
      .finally(() => deliveries.delete(delivery))
    deliveries.add(delivery)
  })

  for (const [channel, channelHandlers] of Object.entries(options.subscribers ?? {})) {
    for (const handler of channelHandlers) bus.on(channel as Channel, handler as EventHandler<Channel>)
  }
  app.decorate('events', bus)
  app.decorateRequest('causedEvents', null)
  app.addHook('onClose', async () => { await Promise.all(deliveries) })
}

export default fp(eventsPlugin, { name: 'events', dependencies: ['store', 'tracing'] })
