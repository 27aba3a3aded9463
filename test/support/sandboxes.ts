// An instance with sandboxes on (SANDBOXES=on, the operations API on a port of its own), and a promise of sandboxes
// tried on each store whatever store the run names (Redis is required under CI=true).
import t, { type Test } from 'tap'
import type { operations } from '../../generated/operations/openapi.js'
import { freePort } from '../../harness/net.js'
import { Api } from './api.js'
import { build } from './app.js'
import { opsCall } from './ops.js'
import { redisKeyPrefix, redisSkip } from './redis.js'

export type Sandbox = operations['createSandbox']['responses'][201]['content']['application/json']

export type Kept = 'memory' | 'redis'

export async function withSandboxes (t: Test, store: Kept, env: NodeJS.ProcessEnv = {}, options: Parameters<typeof build>[2] = {}): Promise<{ api: Api, ops: string, create: () => Promise<Api> }> {
  const opsPort = await freePort()
  const ops = `http://127.0.0.1:${opsPort}`
  const onStore = store === 'redis' ? { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) } : { STORE: 'memory' }
  const api = await build(t, { ...onStore, SANDBOXES: 'on', OPS_PORT: String(opsPort), ...env }, options)
  const create = async (): Promise<Api> => {
    const { status, json } = await opsCall(t, ops, 'createSandbox', 'POST', '/sandboxes', {})
    if (status !== 201) throw new Error(`createSandbox answered ${status}`)
    return new Api(api.app, (json as Sandbox).basePath)
  }
  return { api, ops, create }
}

export const redisSkipped = await redisSkip()

/** A promise of sandboxes, tried on each store: each keeps them its own way. */
export function onEachStore (name: string, test: (t: Test, store: Kept) => Promise<void>): void {
  for (const store of ['memory', 'redis'] as const) {
    t.test(`${name} (${store})`, { skip: store === 'redis' && redisSkipped }, async (t) => { await test(t, store) })
  }
}
