// npm run bench:sandboxes: what a sandbox costs on the memory store. The time a POST /sandboxes takes on the
// operations API (median and 99th percentile of BENCH_SANDBOXES, one at a time, over a kept-alive connection), and
// the heap an empty sandbox takes (the heap's growth over as many, after a full collection, divided by them).
import { buildApp } from '../../src/app/app.js'
import { loadConfig } from '../../src/config/config.js'
import { freePort } from '../../harness/net.js'

const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 1000)
const collectGarbage = (): void => { (globalThis as { gc?: () => void }).gc?.() }

const opsPort = await freePort()
const app = await buildApp(loadConfig({ LOG_LEVEL: 'silent', PORT: '0', OPS_PORT: String(opsPort), SANDBOXES: 'on', SANDBOX_LIMIT: String(SANDBOXES * 2) }))
await app.ready()
const create = async (): Promise<void> => {
  const response = await fetch(`http://127.0.0.1:${opsPort}/sandboxes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  if (response.status !== 201) throw new Error(`POST /sandboxes answered ${response.status}`)
  await response.arrayBuffer()
}
// Warmed up first: the first requests compile the route's code.
for (let index = 0; index < SANDBOXES / 10; index += 1) await create()
collectGarbage()
collectGarbage()
const heapBefore = process.memoryUsage().heapUsed
const times: number[] = []
for (let index = 0; index < SANDBOXES; index += 1) {
  const started = performance.now()
  await create()
  times.push(performance.now() - started)
}
collectGarbage()
collectGarbage()
const heapAfter = process.memoryUsage().heapUsed
times.sort((a, b) => a - b)
const at = (share: number): string => times[Math.floor(share * (times.length - 1))]!.toFixed(3)
console.log(`${SANDBOXES} sandboxes: POST /sandboxes median ${at(0.5)} ms, 99th percentile ${at(0.99)} ms; ` +
  `an empty sandbox ${Math.round((heapAfter - heapBefore) / SANDBOXES)} bytes of heap (${app.sandboxes?.size} exist)`)
await app.close()
