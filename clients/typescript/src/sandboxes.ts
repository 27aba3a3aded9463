// A client bound to a sandbox of its own (a service started with SANDBOXES=on): the sandbox is created, reset and
// deleted, its clock moved and its events read or delivered, on the operations API, typed by its contract (ops/openapi.yaml), and the client is the official one,
// whose base is the sandbox's.
import createClient from 'openapi-fetch'
import { ok } from './answers.js'
import type { operations, paths } from './generated/operations/openapi.js'
import { createItemsClient, type ItemsClient, type ItemsClientOptions } from './items-client.js'

export type Sandbox = operations['createSandbox']['responses'][201]['content']['application/json']
/** Users and items a sandbox starts with, in a SEED_FILE's shape. */
export type SandboxFixtures = operations['createSandbox']['requestBody']['content']['application/json']
export type SandboxEvents = operations['listSandboxEvents']['responses'][200]['content']['application/json']
export type SandboxClock = operations['advanceSandboxClock']['responses'][200]['content']['application/json']
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
  return {
    sandbox,
    client: createItemsClient({ ...options, baseUrl: `${options.baseUrl.replace(/\/$/, '')}${sandbox.basePath}` }),
    events: async (after = 0) => await ok(operationsApi.GET('/sandboxes/{sandboxId}/events', { params: { path: path.params.path, query: { after } } })),
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
