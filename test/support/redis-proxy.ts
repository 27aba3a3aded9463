// A TCP proxy in front of a real Redis, as a service meets one over a bad network: it forwards every byte both ways,
// and injects the fault it is armed with into the next command that carries a marker (a script's SHA-1, or its
// text on the first EVAL; or a text of a plain command's, a key's or a field's name): the connection cut before the
// command reaches Redis, the reply lost after Redis ran it, the reply held past the client's command timeout, or the
// reply lost and Redis then out of reach until `up`; or the command held until something else is done first
// (`before`: another instance's write between a read and the commit decided on it). Or it black-holes the connections of one kind open now: every
// byte both ways held, none closed, until `resume`. Or it partitions: the connections of some kinds black-holed,
// those open now and those made later, until `resume`.
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { connect, createServer, type Socket } from 'node:net'
import { COMMAND_TIMEOUT_MS } from '../../src/store/redis/commands.js'
import type { Script } from '../../src/store/redis/commands.js'
import { commitScripts } from '../../src/store/redis/commit.js'
import { compiledCommitScripts } from '../../src/store/redis/compiled-commit.js'

export type RedisFault = 'drop-connection' | 'drop-reply' | 'delay-reply' | 'drop-reply-then-down'
export const REDIS_FAULTS: readonly RedisFault[] = ['drop-connection', 'drop-reply', 'delay-reply', 'drop-reply-then-down']

export type FaultOutcome = 'made' | 'not made' | 'unknown'
/** What each fault leaves of a write: one Redis ran, one it never received, one whose outcome nobody can learn in time. */
export const FAULT_OUTCOMES: Readonly<Record<RedisFault, FaultOutcome>> = {
  'drop-connection': 'not made',
  'drop-reply': 'made',
  'delay-reply': 'made',
  'drop-reply-then-down': 'unknown'
}
/**
 * A heartbeat for an instance behind the proxy: 'delay-reply' holds a reply past the command timeout on a
 * connection the instance still trusts, held as long as the heartbeat's own deadline, and whichever of the two an
 * instance found first would decide the answer. A connection silent past that deadline is stalls.test.ts's and
 * outage.test.ts's.
 */
export const TRUSTING_HEARTBEAT = { intervalMs: 250, deadlineMs: 600_000 }
/** What the service answers a write the outcome leaves: `made`, the write's own answer, when it was made. */
export const answerTo = (outcome: FaultOutcome, made: number): number => ({ made, 'not made': 503, unknown: 504 })[outcome]

/** An instance's connections: the one its commands go on, and the one it hears invalidations on (tracking.ts). */
export type RedisConnection = 'main' | 'invalidations'
export const REDIS_CONNECTIONS: readonly RedisConnection[] = ['main', 'invalidations']
/** Redis's own peers in front of a primary: a replica's link (it sends REPLCONF) and a sentinel's (it names itself sentinel-…). */
export type RedisPeer = 'replica' | 'sentinel'
export type ProxiedConnection = RedisConnection | RedisPeer

// Past the client's command timeout.
const DELAY_MS = COMMAND_TIMEOUT_MS + 500

export interface RedisProxy {
  url: string
  /** The next command of `script` (of any of the scripts, as they are then), or the next that carries `text`, meets `fault`. */
  arm: (command: Marked, fault: RedisFault) => void
  /** The next command of `script`, or the next that carries `text`, goes on to Redis once `done` is (what its connection sends after it waits with it). */
  before: (command: Marked, done: () => Promise<unknown>) => void
  /** Faults injected so far. */
  readonly injected: RedisFault[]
  /** Lets connections through again after `drop-reply-then-down`. */
  up: () => void
  /** Black-holes the connections of that kind open now, without closing them. */
  stall: (connection: RedisConnection) => void
  /** Black-holes the connections of these kinds, those open now and those made later, until `resume`. */
  partition: (connections: readonly ProxiedConnection[]) => void
  /** Ends the partition, and lets the stalled connections go on, what they held delivered in order. */
  resume: () => void
  close: () => Promise<void>
}

/** What a command is known by: a script, the scripts a function lists when a command passes, or a text. */
export type Marked = Script | string | (() => Iterable<Script>)

/** Every commit (commit.ts): the decoded one, and those this process compiled so far. */
export const ANY_COMMIT = (): Iterable<Script> => [commitScripts.commit, ...compiledCommitScripts()]

/** The markers ioredis sends a script by: its SHA-1 (EVALSHA) and, when Redis lacks it, its text (EVAL). */
const scriptMarkers = (script: Script): string[] => [createHash('sha1').update(script.lua).digest('hex'), script.lua]

// Looked up as each command passes: a script compiled after the proxy was armed is among them.
const carries = (text: string, command: Marked): boolean => {
  if (typeof command === 'string') return text.includes(command)
  const scripts = typeof command === 'function' ? [...command()] : [command]
  return scripts.some((script) => scriptMarkers(script).some((marker) => text.includes(marker)))
}

/** What a connection, still taken for the service's commands, shows itself to be by what it sends. */
function kindOf (text: string): ProxiedConnection {
  if (text.includes('__redis__:invalidate')) return 'invalidations'
  if (text.includes('REPLCONF')) return 'replica'
  if (/CLIENT\r\n\$\d+\r\nSETNAME\r\n\$\d+\r\nsentinel-/i.test(text)) return 'sentinel'
  return 'main'
}

export async function redisProxy (target: string): Promise<RedisProxy> {
  const { hostname, port } = new URL(target)
  const injected: RedisFault[] = []
  const sockets = new Set<Socket>()
  let armed: { command: Marked, fault: RedisFault } | undefined
  let waiting: { command: Marked, done: () => Promise<unknown> } | undefined
  let down = false
  let partitioned = new Set<ProxiedConnection>()
  interface Pair { kind: ProxiedConnection, stalled: boolean, resume: () => void }
  const pairs = new Set<Pair>()
  const server = createServer((client) => {
    if (down) {
      client.destroy()
      return
    }
    const redis = connect(Number(port), hostname)
    for (const socket of [client, redis]) {
      sockets.add(socket)
      socket.on('close', () => { sockets.delete(socket) })
      socket.on('error', () => {})
    }
    // While stalled, what each side sends is held, to go on in order once the stall ends.
    const toRedis: Buffer[] = []
    const toClient: Buffer[] = []
    const pair: Pair = {
      kind: 'main',
      stalled: partitioned.has('main'),
      resume: () => {
        pair.stalled = false
        for (const chunk of toRedis.splice(0)) redis.write(chunk)
        for (const chunk of toClient.splice(0)) client.write(chunk)
      }
    }
    pairs.add(pair)
    const cut = (): void => { pairs.delete(pair); client.destroy(); redis.destroy() }
    client.on('close', cut)
    redis.on('close', cut)
    // What happens to the next reply: it is lost, or it (and every reply after it, in order) waits.
    let nextReply: RedisFault | undefined
    const held: Buffer[] = []
    const release = (): void => { for (const chunk of held.splice(0)) client.write(chunk) }
    client.on('data', (chunk: Buffer) => {
      const text = chunk.toString('latin1')
      if (pair.kind === 'main') pair.kind = kindOf(text)
      if (partitioned.has(pair.kind)) pair.stalled = true
      if (pair.stalled) {
        toRedis.push(chunk)
        return
      }
      if (waiting !== undefined && carries(text, waiting.command)) {
        const { done } = waiting
        waiting = undefined
        pair.stalled = true
        toRedis.push(chunk)
        void done().finally(pair.resume)
        return
      }
      const fault = armed !== undefined && carries(text, armed.command) ? armed.fault : undefined
      if (fault === undefined) {
        redis.write(chunk)
        return
      }
      armed = undefined
      injected.push(fault)
      if (fault === 'drop-connection') {
        cut()
        return
      }
      nextReply = fault
      redis.write(chunk)
    })
    redis.on('data', (chunk: Buffer) => {
      if (pair.stalled) {
        toClient.push(chunk)
        return
      }
      const fault = nextReply
      nextReply = undefined
      if (fault === 'drop-reply' || fault === 'drop-reply-then-down') {
        if (fault === 'drop-reply-then-down') down = true
        cut()
        return
      }
      if (fault === 'delay-reply') setTimeout(release, DELAY_MS)
      if (fault === 'delay-reply' || held.length > 0) held.push(chunk)
      else client.write(chunk)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port')
  // The target's URL but for where it points: its user, password and database are the proxied client's too.
  const url = new URL(target)
  url.hostname = '127.0.0.1'
  url.port = String(address.port)
  return {
    url: url.href,
    arm: (command, fault) => { armed = { command, fault } },
    before: (command, done) => { waiting = { command, done } },
    injected,
    up: () => { down = false },
    stall: (connection) => { for (const pair of pairs) if (pair.kind === connection) pair.stalled = true },
    partition: (connections) => {
      partitioned = new Set(connections)
      for (const pair of pairs) if (partitioned.has(pair.kind)) pair.stalled = true
    },
    resume: () => {
      partitioned = new Set()
      for (const pair of pairs) pair.resume()
    },
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    }
  }
}
