// A client bound to a sandbox of its own (a service started with SANDBOXES=on): the sandbox is created, reset and
// deleted, its clock moved, its events read or delivered and its journal read and awaited, on the operations API,
// typed by its contract (ops/openapi.yaml), and the client is the official one, whose base is the sandbox's.
import createClient from 'openapi-fetch'
import { ok } from './answers.js'
import type { operations, paths } from './generated/operations/openapi.js'
import { createItemsClient, type ItemsClient, type ItemsClientOptions } from './items-client.js'

export type Sandbox = operations['createSandbox']['responses'][201]['content']['application/json']
/** Users and items a sandbox starts with, in a SEED_FILE's shape. */
export type SandboxFixtures = operations['createSandbox']['requestBody']['content']['application/json']
export type SandboxEvents = operations['listSandboxEvents']['responses'][200]['content']['application/json']
export type SandboxClock = operations['advanceSandboxClock']['responses'][200]['content']['application/json']
/** A page of the sandbox's journal: what its requests did, each with the events it caused. */
export type SandboxJournal = operations['listSandboxJournal']['responses'][200]['content']['application/json']
export type SandboxJournalEntry = SandboxJournal['entries'][number]
/** What a journal's page asks for: its filters (`requestId`, `idempotencyKey`, `operationId`, `type`), `after`, `limit`, `waitSeconds`. */
export type SandboxJournalQuery = NonNullable<operations['listSandboxJournal']['parameters']['query']>
/** What `waitFor` waits for: an entry that matches every filter given, after `after` (from the first when left out). */
export type SandboxJournalFilter = Pick<SandboxJournalQuery, 'requestId' | 'idempotencyKey' | 'operationId' | 'type' | 'after'>

// The longest wait the service holds at once (the contract's `waitSeconds` maximum).
const MOST_WAIT_SECONDS = 30
/** Where a sandbox's events are delivered, signed with `secret` (Standard Webhooks' `whsec_…`). */
export type SandboxWebhook = operations['setSandboxWebhook']['requestBody']['content']['application/json']

export interface SandboxClientOptions extends ItemsClientOptions {
  /** The operations API's address (OPS_PORT), e.g. `http://127.0.0.1:9464`. */
  operationsUrl: string
  /** OPS_TOKEN, when the operations API requires it. */
  operationsToken?: string
  /** What the sandbox starts with, and a reset puts back; empty when left out. */
  fixtures?: SandboxFixtures
}

export interface SandboxClient {
  readonly sandbox: Sandbox
  /** The official client, its base the sandbox's. */
  readonly client: ItemsClient
  /** The events the sandbox's changes caused, oldest first, after `after` (the last page's `next`). */
  events: (after?: number) => Promise<SandboxEvents>
  /** The journal's entries that match `query`, oldest first (the page's `next` continues it); waited for with `waitSeconds`. */
  journal: (query?: SandboxJournalQuery) => Promise<SandboxJournal>
  /**
   * The first entry that matches `filter`, once the sandbox has one: waited for on the service, not polled. Rejects
   * when none is added within `timeoutSeconds` (30 by default).
   */
  waitFor: (filter: SandboxJournalFilter, timeoutSeconds?: number) => Promise<SandboxJournalEntry>
  /** Moves the sandbox's clock on by `seconds`: its tokens, sessions, keys and rate-limit windows follow it. */
  advanceClock: (seconds: number) => Promise<SandboxClock>
  /** Delivers the sandbox's events from now on to a receiver of the test's, signed, in place of any before; `undefined` stops. */
  webhook: (receiver: SandboxWebhook | undefined) => Promise<void>
  /** Empties the sandbox and puts its fixtures back, its clock the service's: its sessions end (sign in again). */
  reset: () => Promise<void>
  /** Deletes the sandbox with everything it keeps. */
  delete: () => Promise<void>
}

/** Creates a sandbox and gives the official client bound to it: `const { client } = await createSandboxClient({ baseUrl, operationsUrl })`. */
export async function createSandboxClient ({ operationsUrl, operationsToken, fixtures = {}, ...options }: SandboxClientOptions): Promise<SandboxClient> {
  const operationsApi = createClient<paths>({
    baseUrl: operationsUrl,
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    ...(operationsToken === undefined ? {} : { headers: { authorization: `Bearer ${operationsToken}` } })
  })
  const sandbox = await ok(operationsApi.POST('/sandboxes', { body: fixtures }))
  const path = { params: { path: { sandboxId: sandbox.id } } }
  const journal = async (query: SandboxJournalQuery = {}): Promise<SandboxJournal> =>
    await ok(operationsApi.GET('/sandboxes/{sandboxId}/journal', { params: { path: path.params.path, query } }))
  return {
    sandbox,
    client: createItemsClient({ ...options, baseUrl: `${options.baseUrl.replace(/\/$/, '')}${sandbox.basePath}` }),
    events: async (after = 0) => await ok(operationsApi.GET('/sandboxes/{sandboxId}/events', { params: { path: path.params.path, query: { after } } })),
    journal,
    waitFor: async ({ after, ...filter }, timeoutSeconds = MOST_WAIT_SECONDS) => {
      const until = Date.now() + timeoutSeconds * 1000
      let place = after
      for (;;) {
        const waitSeconds = Math.max(0, Math.min(MOST_WAIT_SECONDS, Math.ceil((until - Date.now()) / 1000)))
        const { entries: [entry], next } = await journal({ ...filter, ...(place === undefined ? {} : { after: place }), limit: 1, waitSeconds })
        if (entry !== undefined) return entry
        if (Date.now() >= until) throw new Error(`no entry of the sandbox's journal matched ${JSON.stringify(filter)} within ${timeoutSeconds} s`)
        place = next
      }
    },
    advanceClock: async (seconds) => await ok(operationsApi.POST('/sandboxes/{sandboxId}/clock/advance', { ...path, body: { seconds } })),
    webhook: async (receiver) => {
      await ok(receiver === undefined
        ? operationsApi.DELETE('/sandboxes/{sandboxId}/webhook', path)
        : operationsApi.PUT('/sandboxes/{sandboxId}/webhook', { ...path, body: receiver }))
    },
    reset: async () => { await ok(operationsApi.POST('/sandboxes/{sandboxId}/reset', path)) },
    delete: async () => { await ok(operationsApi.DELETE('/sandboxes/{sandboxId}', path)) }
  }
}
