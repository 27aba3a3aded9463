import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { JWT_SECRET } from './service.js'
import { startService, stop } from './servers.js'

// A sign-in flood, with the production defaults (rate limits on): one address (127.0.0.1) floods sign-ins with
// distinct unknown emails while another (127.0.0.2) signs in to real accounts, one at a time; its latency is
// compared with the same sign-ins on an idle service. The loopback range is this machine's own. The flood is a
// process of its own at the lowest CPU priority (nice 19), as if it came from elsewhere; the sign-ins are timed
// from this process. It runs twice: with the service (and so its hashing process) on one core, as every other
// scenario; and with the service free to use both cores (this process and the flood stay on the other one).
export const FLOOD_SIGN_INS = 20
const FLOOD_START_MS = 2000
async function postFrom (localAddress: string, url: string, body: unknown): Promise<{ status: number, ms: number }> {
  const started = performance.now()
  const payload = JSON.stringify(body)
  const status = await new Promise<number>((resolve, reject) => {
    const outgoing = request(url, { method: 'POST', localAddress, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (response) => {
      response.resume()
      response.on('end', () => { resolve(response.statusCode ?? 0) })
    })
    outgoing.on('error', reject)
    outgoing.end(payload)
  })
  return { status, ms: performance.now() - started }
}
const percentile = (samples: Array<{ ms: number }>, share: number): number => {
  const sorted = samples.map((sample) => sample.ms).sort((a, b) => a - b)
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(share * sorted.length))] ?? NaN)
}
export interface SignInFlood {
  idle: { p50: number, p99: number }
  flooded: { p50: number, p99: number }
  failedSignIns: number
  floodRequests: number
  floodStatuses: { '2xx': number, non2xx: number }
}
export async function floodSignIns (pinned: boolean, { seconds, connections }: { seconds: number, connections: number }): Promise<SignInFlood> {
  // Every limit at its production default, as an attacker would meet them.
  const flooded = await startService({ JWT_SECRET, LOG_LEVEL: 'warn' }, pinned)
  const accounts = Array.from({ length: FLOOD_SIGN_INS }, (_, index) => ({ email: `member${index}@example.com`, password: 'benchmark password' }))
  for (const account of accounts) await postFrom('127.0.0.3', `${flooded.url}/v1/auth/register`, { ...account, firstName: 'Flood', lastName: 'Bench', role: 'viewer' })
  const signInAll = async (): Promise<Array<{ status: number, ms: number }>> => {
    const answers = []
    for (const account of accounts) answers.push(await postFrom('127.0.0.2', `${flooded.url}/v1/auth/login`, account))
    return answers
  }
  const idleSignIns = await signInAll()
  const flood = await floodSignInsAt(`${flooded.url}/v1/auth/login`, seconds, connections)
  const floodedSignIns = await signInAll()
  const floodResult = await flood.result
  await stop(flooded)
  return {
    idle: { p50: percentile(idleSignIns, 0.5), p99: percentile(idleSignIns, 0.99) },
    flooded: { p50: percentile(floodedSignIns, 0.5), p99: percentile(floodedSignIns, 0.99) },
    failedSignIns: [...idleSignIns, ...floodedSignIns].filter((answer) => answer.status !== 200).length,
    floodRequests: floodResult.requests.total,
    floodStatuses: { '2xx': floodResult['2xx'], non2xx: floodResult.non2xx }
  }
}

/**
 * autocannon's command line at nice 19, each request with a new email, for `seconds` (long enough to outlast the
 * sign-ins timed meanwhile); resolves once the flood is under way.
 */
async function floodSignInsAt (url: string, seconds: number, connections: number): Promise<{ result: Promise<{ requests: { total: number }, '2xx': number, non2xx: number }> }> {
  const flood = spawn('nice', [
    '-n', '19', process.execPath, 'node_modules/autocannon/autocannon.js', '--json', '--idReplacement',
    '--connections', String(connections), '--duration', String(seconds), '--method', 'POST',
    '--headers', 'content-type=application/json', '--body', '{"email":"flood[<id>]@example.com","password":"guess guess"}', url
  ], { stdio: ['ignore', 'pipe', 'inherit'] })
  let output = ''
  flood.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const result = once(flood, 'exit').then(() => JSON.parse(output))
  // With --json autocannon says nothing until it ends; Node starts it in well under a second here.
  await new Promise((resolve) => setTimeout(resolve, FLOOD_START_MS))
  return { result }
}
