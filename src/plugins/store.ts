import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Store } from '../store/store.js'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

interface StorePluginOptions {
  store: Store
}

/**
 * Shares the store with every route, and closes it with the app; which implementation it is, is the caller of
 * buildApp's choice.
 */
async function storePlugin (app: FastifyInstance, options: StorePluginOptions): Promise<void> {
  app.decorate('store', options.store)
  app.addHook('onClose', async () => { await options.store.close() })
}

export default fp(storePlugin, { name: 'store' })
