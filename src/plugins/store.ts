import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { StoreConfig } from '../config.js'
import { createMemoryStore } from '../store/memory-store.js'
import { connectRedisStore } from '../store/redis/connection.js'
import type { Store } from '../store/store.js'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

interface StorePluginOptions {
  config: StoreConfig
  /** A store built by the caller (tests); otherwise the one `config` names. */
  store?: Store
}

async function openStore (app: FastifyInstance, config: StoreConfig): Promise<Store> {
  if (config.kind === 'memory') {
    return createMemoryStore({ maxItemsPerContributor: config.maxItemsPerUser, maxUsers: config.memoryMaxUsers, maxItems: config.memoryMaxItems })
  }
  return await connectRedisStore({
    url: config.redisUrl,
    keyPrefix: config.redisKeyPrefix,
    maxItemsPerContributor: config.maxItemsPerUser,
    logger: app.log.child({ store: 'redis' })
  })
}

/**
 * Shares the store with every route. The store is connected before the app is ready (a Redis that cannot be
 * reached stops the start) and closed with the app, after the last request.
 */
async function storePlugin (app: FastifyInstance, options: StorePluginOptions): Promise<void> {
  const store = options.store ?? await openStore(app, options.config)
  app.decorate('store', store)
  app.addHook('onClose', async () => { await store.close() })
}

export default fp(storePlugin, { name: 'store' })
