// The official TypeScript client of the Items Service. Its types are openapi-typescript's, generated from the
// contract by `npm run generate` (`src/generated/openapi.ts`, beside generated/openapi.ts); its calls are openapi-fetch's, with one middleware that does what
// every client of this service needs: it signs requests in and refreshes an expired session once however many
// requests meet it, waits when `RateLimit` says a limit is spent, sends 429 and 503 again after `Retry-After`, gives
// each create its `Idempotency-Key`, and sends a request whose answer was lost (or whose outcome the service could
// not learn, 504) again only when that is safe. It follows no redirect: the contract declares none, and one
// followed would carry the request's body (a password, a refresh token) wherever it points.

export type { components, operations, paths, webhooks } from './generated/openapi.js'
export type { CallOptions } from './generated/resources.js'
export { etagOf, ItemsApiError, ItemsNetworkError, ok, okOrUnchanged, type ErrorCode, type Session } from './answers.js'
export {
  createSandboxClient, type Sandbox, type SandboxClient, type SandboxClientOptions, type SandboxEvents, type SandboxFixtures, type SandboxJournal, type SandboxJournalEntry,
  type SandboxJournalFilter, type SandboxJournalQuery
} from './sandboxes.js'
export { createItemsClient, type ItemFilter, type ItemsClient, type ItemsClientOptions } from './items-client.js'
