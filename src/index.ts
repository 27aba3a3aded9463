// The package's public entry point, for embedding the service in another program or its integration tests.
export { buildApp, type BuildAppOptions } from './app/app.js'
export { itemsService, type ItemsServiceOptions } from './app/service.js'
export { type AppConfig, type AppSettings, loadConfig } from './config/config.js'
export { ConfigError } from './config/values.js'
export type { Channel, DomainEvent, EventHandler, Subscribers } from './plugins/app/events.js'
export { createMemoryStore } from './store/memory/index.js'
export type { Item, Session, User } from './domain/index.js'
export type { ItemStore, SessionStore, Store, UserStore } from './store/store.js'
