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

/** Shares the store with every route; which implementation it is, is the caller of buildApp's choice. */
async function storePlugin (app: FastifyInstance, options: StorePluginOptions): Promise<void> {
  app.decorate('store', options.store)
}

export default fp(storePlugin, { name: 'store' })
