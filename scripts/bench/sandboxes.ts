// npm run bench:sandboxes: what a sandbox costs, on the store STORE names (memory by default; redis at REDIS_URL).
// The time a POST /sandboxes and a reset of one take on the operations API (median and 99th percentile of
// BENCH_SANDBOXES each, one at a time, over a kept-alive connection; issue 100's target: 20 ms at the 99th), and the
// memory an empty sandbox takes: the heap's growth over as many, after a full collection, divided by them; on Redis,
// Redis's own (INFO memory's used_memory), and the keys are deleted afterwards.
import { Redis } from 'ioredis'
import { buildApp } from '../../src/app/app.js'
import { loadConfig } from '../../src/config/config.js'
import { freePort } from '../../harness/net.js'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'

const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 1000)
const STORE = process.env.STORE ?? 'memory'
const KEY_PREFIX = `items-service-bench-sandboxes:${process.pid}:`
const collectGarbage = (): void => { (globalThis as { gc?: () => void }).gc?.() }

const redis = STORE === 'redis' ? new Redis(REDIS_URL) : undefined
const usedMemory = async (): Promise<number> => {
  if (redis === undefined) {
    collectGarbage()
    collectGarbage()
    return process.memoryUsage().heapUsed
  }
  return Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1])
}

const opsPort = await freePort()
const app = await buildApp(loadConfig({
  LOG_LEVEL: 'silent',
  PORT: '0',
  OPS_PORT: String(opsPort),
  SANDBOXES: 'on',
  SANDBOX_LIMIT: String(SANDBOXES * 2),
  STORE,
  REDIS_URL,
  REDIS_KEY_PREFIX: KEY_PREFIX,
  JWT_SECRET: 'a-bench-secret-that-is-at-least-32-bytes-long'
}))
await app.ready()
const ops = `http://127.0.0.1:${opsPort}`
const create = async (): Promise<string> => {
  const response = await fetch(`${ops}/sandboxes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  if (response.status !== 201) throw new Error(`POST /sandboxes answered ${response.status}`)
  return ((await response.json()) as { id: string }).id
}
const reset = async (id: string): Promise<void> => {
  const response = await fetch(`${ops}/sandboxes/${id}/reset`, { method: 'POST' })
  if (response.status !== 200) throw new Error(`POST /sandboxes/{id}/reset answered ${response.status}`)
  await response.arrayBuffer()
}
// How long each call of `each` takes, one at a time: its median and 99th percentile.
const timed = async <T>(inputs: readonly T[], each: (input: T) => Promise<unknown>): Promise<string> => {
  const times: number[] = []
  for (const input of inputs) {
    const started = performance.now()
    await each(input)
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  const at = (share: number): number => times[Math.floor(share * (times.length - 1))]!
  return `median ${at(0.5).toFixed(3)} ms, 99th percentile ${at(0.99).toFixed(3)} ms${at(0.99) > 20 ? ' (past 20 ms)' : ''}`
}
try {
  // Warmed up first: the first requests compile the routes' code.
  const warm = []
  for (let index = 0; index < SANDBOXES / 10; index += 1) warm.push(await create())
  for (const id of warm) await reset(id)
  const before = await usedMemory()
  const ids: string[] = []
  const creates = await timed(Array.from({ length: SANDBOXES }), async () => { ids.push(await create()) })
  const after = await usedMemory()
  const resets = await timed(ids, reset)
  console.log(`${SANDBOXES} sandboxes on ${STORE}: POST /sandboxes ${creates}; a reset ${resets}; ` +
    `an empty sandbox ${Math.round((after - before) / SANDBOXES)} bytes of ${redis === undefined ? 'heap' : 'Redis memory'} (${await app.sandboxes?.count()} exist)`)
} finally {
  await app.close()
  if (redis !== undefined) {
    redis.disconnect()
    await deleteKeys(KEY_PREFIX)
  }
}
