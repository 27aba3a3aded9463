// The dead-letter attack of issue 39, against a real service process: 16 subscribers that never answer give up
// EVENTS events of the largest size the contract allows (a description of 10 000 control characters), then
// LISTERS operators walk every subscriber's pages with their events while a prober asks /health/live every 20 ms.
// Prints the service's resident memory (now and at its peak), the largest answer and /health/live's latencies.
// `npm run bench:dead-letters`; EVENTS (755), LISTERS (4) and STORE (memory) may be set.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../harness/net.js'

interface Page { subscribers: Array<{ subscriber: string, total: number, next?: string, deadLetters: unknown[] }> }

const EVENTS = Number(process.env.EVENTS ?? 755)
const LISTERS = Number(process.env.LISTERS ?? 4)

const [port, opsPort, closed] = [await freePort(), await freePort(), await freePort()]
const secret = `whsec_${Buffer.from('a webhook secret of at least 24 bytes').toString('base64')}`
const service = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
  env: {
    ...process.env,
    PORT: String(port),
    OPS_PORT: String(opsPort),
    WEBHOOKS: JSON.stringify(Array.from({ length: 16 }, (_, index) => ({ url: `http://127.0.0.1:${closed}/hook-${index}`, secret }))),
    WEBHOOK_RETRY_DELAYS_MS: '10',
    RATE_LIMIT: 'off',
    LOG_LEVEL: 'fatal'
  },
  stdio: ['ignore', 'ignore', 'inherit']
})
const api = `http://127.0.0.1:${port}`
const ops = `http://127.0.0.1:${opsPort}`
/** The service's resident memory and its peak, in MB (Linux). */
const memory = (): { rss: number, peak: number } => {
  const status = readFileSync(`/proc/${service.pid}/status`, 'utf8')
  const kib = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0)
  return { rss: Math.round(kib('VmRSS') / 1024), peak: Math.round(kib('VmHWM') / 1024) }
}

try {
  for (;;) {
    const ready = await fetch(`${api}/health/live`).then((response) => response.ok, () => false)
    if (ready) break
    await sleep(100)
  }
  const registered = await fetch(`${api}/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'attacker@example.com', password: 'a long enough password', firstName: 'A', lastName: 'B', role: 'contributor' })
  })
  const { accessToken } = await registered.json() as { accessToken: string }
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${accessToken}` }
  for (let index = 0; index < EVENTS; index += 1) {
    await fetch(`${api}/v1/items`, { method: 'POST', headers, body: JSON.stringify({ name: `item ${index}`, description: '\u0001'.repeat(10_000) }) })
  }
  let kept: Page = { subscribers: [] }
  for (let previous = -1; ; await sleep(500)) {
    kept = await (await fetch(`${ops}/webhooks/dead-letters?limit=1`)).json() as Page
    const held = kept.subscribers.reduce((sum, { total }) => sum + total, 0)
    if (held === previous) break
    previous = held
  }
  const before = memory()
  console.log(`dead letters held: ${kept.subscribers.map(({ total }) => total).join(' ')}; service memory before listing: ${before.rss} MB (peak ${before.peak} MB)`)

  let largest = 0
  let pages = 0
  const list = async (): Promise<void> => {
    for (const { subscriber } of kept.subscribers) {
      for (let after: string | undefined = ''; after !== undefined;) {
        const text = await (await fetch(`${ops}/webhooks/dead-letters?subscriber=${encodeURIComponent(subscriber)}&events=true${after === '' ? '' : `&after=${after}`}`)).text()
        largest = Math.max(largest, Buffer.byteLength(text))
        pages += 1
        after = (JSON.parse(text) as Page).subscribers[0]?.next
      }
    }
  }
  const latencies: number[] = []
  const listing = { done: false }
  const probe = async (): Promise<void> => {
    while (!listing.done) {
      const started = performance.now()
      await fetch(`${api}/health/live`)
      latencies.push(performance.now() - started)
      await sleep(20)
    }
  }
  const started = performance.now()
  const probing = probe()
  await Promise.all(Array.from({ length: LISTERS }, list))
  listing.done = true
  await probing
  const after = memory()
  latencies.sort((a, b) => a - b)
  const at = (share: number): string => (latencies[Math.min(latencies.length - 1, Math.floor(share * latencies.length))] ?? 0).toFixed(1)
  console.log(`${LISTERS} listers, ${pages} pages in ${((performance.now() - started) / 1000).toFixed(1)} s; largest answer ${(largest / 1024 / 1024).toFixed(2)} MiB`)
  console.log(`service memory after: ${after.rss} MB, peak ${after.peak} MB`)
  console.log(`/health/live meanwhile (${latencies.length} probes): median ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`)
} finally {
  service.kill('SIGTERM')
}
