import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { webhooks } from '../../generated/openapi.js'
import { schemas } from '../../generated/schemas.js'

/** The channels are the contract's webhooks; an event is the CloudEvents envelope declared there. */
export type Channel = keyof webhooks
export type DomainEvent<C extends Channel> =
  webhooks[C]['post']['requestBody']['content']['application/cloudevents+json']
export type EventHandler<C extends Channel> = (event: DomainEvent<C>) => void | Promise<void>
export type Subscribers = { [C in Channel]?: ReadonlyArray<EventHandler<C>> }

export interface EventBus {
  on<C extends Channel>(channel: C, handler: EventHandler<C>): void
  off<C extends Channel>(channel: C, handler: EventHandler<C>): void
  /** Wraps `data` in an envelope and delivers it once the current response has been sent. */
  emit<C extends Channel>(channel: C, subject: string, data: DomainEvent<C>['data']): void
}

declare module 'fastify' {
  interface FastifyInstance {
    events: EventBus
  }
}

// The constant fields of every event's envelope, as the contract's ItemEvent schema fixes them.
const { specversion, source, datacontenttype } = schemas.ItemEvent.properties

interface EventsPluginOptions {
  subscribers?: Subscribers
}

async function eventsPlugin (app: FastifyInstance, options: EventsPluginOptions): Promise<void> {
  const handlers = new Map<Channel, Set<EventHandler<Channel>>>()
  const deliveries = new Set<Promise<void>>()

  const deliver = async <C extends Channel>(handler: EventHandler<C>, event: DomainEvent<C>): Promise<void> => {
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
    emit (channel, subject, data) {
      const targets = [...(handlers.get(channel) ?? [])]
      if (targets.length === 0) return
      const event = {
        specversion: specversion.const,
        id: randomUUID(),
        source: source.const,
        type: channel,
        time: new Date().toISOString(),
        subject,
        datacontenttype: datacontenttype.const,
        data
      } as DomainEvent<typeof channel>
      // setImmediate runs after the reply has been written, so no handler can delay or change the response.
      const delivery = new Promise<void>((resolve) => setImmediate(resolve))
        .then(async () => { await Promise.all(targets.map(async (handler) => await deliver(handler, event))) })
        .finally(() => deliveries.delete(delivery))
      deliveries.add(delivery)
    }
  }

  for (const [channel, channelHandlers] of Object.entries(options.subscribers ?? {})) {
    for (const handler of channelHandlers) bus.on(channel as Channel, handler as EventHandler<Channel>)
  }
  app.decorate('events', bus)
  app.addHook('onClose', async () => { await Promise.all(deliveries) })
}

export default fp(eventsPlugin, { name: 'events' })
