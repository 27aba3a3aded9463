// npm run bench:sandboxes: what a sandbox costs, on the store STORE names (memory by default; redis at REDIS_URL).
// The time a POST /sandboxes takes on the operations API (median and 99th percentile of BENCH_SANDBOXES, one at a
// time, over a kept-alive connection), and the memory an empty sandbox takes: the heap's growth over as many, after
// a full collection, divided by them; on Redis, Redis's own (INFO memory's used_memory), and the keys are deleted
// afterwards.
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
const create = async (): Promise<void> => {
  const response = await fetch(`http://127.0.0.1:${opsPort}/sandboxes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  if (response.status !== 201) throw new Error(`POST /sandboxes answered ${response.status}`)
  await response.arrayBuffer()
}
try {
  // Warmed up first: the first requests compile the route's code.
  for (let index = 0; index < SANDBOXES / 10; index += 1) await create()
  const before = await usedMemory()
  const times: number[] = []
  for (let index = 0; index < SANDBOXES; index += 1) {
    const started = performance.now()
    await create()
    times.push(performance.now() - started)
  }
  const after = await usedMemory()
  times.sort((a, b) => a - b)
  const at = (share: number): string => times[Math.floor(share * (times.length - 1))]!.toFixed(3)
  console.log(`${SANDBOXES} sandboxes on ${STORE}: POST /sandboxes median ${at(0.5)} ms, 99th percentile ${at(0.99)} ms; ` +
    `an empty sandbox ${Math.round((after - before) / SANDBOXES)} bytes of ${redis === undefined ? 'heap' : 'Redis memory'} (${await app.sandboxes?.count()} exist)`)
} finally {
  await app.close()
  if (redis !== undefined) {
    redis.disconnect()
    await deleteKeys(KEY_PREFIX)
  }
}
