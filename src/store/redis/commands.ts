import type { ChainableCommander, Redis } from 'ioredis'
import { StoreOutOfMemoryError, StoreUnavailableError } from '../store.js'

// Lua scripts make each write atomic across every instance, in one round trip; each module keeps its scripts beside
// the code that runs them, and connection.ts hands them all to the client. Where a script finds keys in data it
// reads (a session's tokens), it builds them from a family's prefix (keys.ts): allowed on one Redis server; on Redis
// Cluster every key must then share one hash slot (docs/redis.md).

export interface Script {
  /** Left out by a script whose keys vary: its caller passes their number first. */
  readonly numberOfKeys?: number
  readonly lua: string
}

// A command Redis has not answered in this long fails (503), so a request never hangs on a stalled server.
export const COMMAND_TIMEOUT_MS = 1000

// Opens every write script: ARGV[1] is its WriteDeadline, taken off ARGV so that the script's own arguments start at
// ARGV[1] (left in place by writeDeadlineAt('in place'): each argument taken off moves every one after it). A write
// that reaches Redis after its deadline changes nothing and fails: by then its instance has stopped waiting and told
// the client it failed (503), so it must not happen later (a retry would duplicate it, or a refresh retried be taken
// for a replay). `now` is the store's time: Redis's, for every instance, and `clockAhead` (ms) more for a sandbox's
// store whose clock was moved on; an absolute expiry Redis keeps is `clockAhead` earlier. A sandbox's write names its
// generation (`registry field generation`, a SandboxGeneration), and changes nothing once that generation has ended
// (the sandbox deleted or reset meanwhile): no key of it is left behind, whatever is in flight. The writes whose reply
// must never be lost record it as well (writeScript, writes.ts).
export const writeDeadlineAt = (place: ArgumentPlace): string => `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local deadline, clockAhead, registry, sandbox, generation = string.match(${place === 'taken off' ? 'table.remove(ARGV, 1)' : 'ARGV[1]'}, '^(%d+)%+(%d+)%+?(%S*) ?(%S*) ?(%d*)$')
if now > tonumber(deadline) then
  return redis.error_reply('DEADLINE the write reached Redis after its deadline; nothing was changed')
end
if registry ~= '' and string.match(redis.call('HGET', registry, sandbox) or '', '^%d+') ~= generation then
  return redis.error_reply('GONE the sandbox was deleted or reset while the write was on its way; nothing was changed')
end
clockAhead = tonumber(clockAhead)
now = now + clockAhead
`

/**
 * Where a write script finds its deadline, outcome key and limit (writeScript): taken off KEYS and ARGV, so that its
 * own start at KEYS[1] and ARGV[1]; or in place, before its own (ARGV[1] to ARGV[4], KEYS[1]), for a script written
 * with its own arguments' places (a compiled commit).
 */
export type ArgumentPlace = 'taken off' | 'in place'

export const WRITE_DEADLINE = writeDeadlineAt('taken off')

/**
 * What opens a write script's arguments (WRITE_DEADLINE): the time on Redis's clock after which it must change
 * nothing, how far the clock of the store it writes runs ahead of Redis's (a sandbox's moved on; 0 otherwise), and
 * for a sandbox's store the generation it writes.
 */
export type WriteDeadline = `${number}+${number}` | `${number}+${number}+${SandboxGeneration}`

/** A sandbox's generation as a write names it: the registry hash (keys.sandboxes), the sandbox's id, the generation. */
export type SandboxGeneration = `${string} ${string} ${number}`

export const writeDeadline = (deadlineMs: number, clockAheadMs: number, generation?: SandboxGeneration): WriteDeadline =>
  generation === undefined ? `${deadlineMs}+${clockAheadMs}` : `${deadlineMs}+${clockAheadMs}+${generation}`

/**
 * Turns what Redis could not do into a StoreUnavailableError: unreachable, timed out, out of memory, loading.
 * A reply that says a command or script is wrong is a bug, and stays what it is.
 */
export function unavailable (error: unknown): never {
  if (error instanceof Error && error.name === 'ReplyError' && /^(ERR|WRONGTYPE)/.test(error.message)) throw error
  if (error instanceof Error && error.name === 'ReplyError' && error.message.startsWith('OOM')) {
    throw new StoreOutOfMemoryError(`Redis: ${error.message}`, { cause: error })
  }
  throw new StoreUnavailableError(`Redis: ${String(error)}`, { cause: error })
}

/** A command's reply, or a StoreUnavailableError when Redis could not give one. */
export async function call<T> (command: Promise<T>): Promise<T> {
  try {
    return await command
  } catch (error) {
    return unavailable(error)
  }
}

/**
 * The replies of reads sent as one transaction (MULTI … EXEC: read at one moment, in one round trip), or a
 * StoreUnavailableError when Redis could not give them.
 */
export async function transaction (reads: ChainableCommander): Promise<unknown[]> {
  // Null only when a WATCH aborts it, which no read sets.
  return repliesOf((await call(reads.exec()))!)
}

/** A transaction's replies, or what one of its commands failed with (unavailable). */
export const repliesOf = (replies: Array<[error: Error | null, reply: unknown]>): unknown[] =>
  replies.map(([error, reply]) => error === null ? reply : unavailable(error))

/** A reply WITHSCORES (each member followed by its score), as its members with their scores, in its order. */
export function scored (reply: readonly string[]): Array<{ member: string, score: number }> {
  const members: Array<{ member: string, score: number }> = []
  for (let index = 0; index + 1 < reply.length; index += 2) members.push({ member: reply[index]!, score: Number(reply[index + 1]) })
  return members
}

// Keys a SCAN asks for at a time (a sandbox's, to delete them or to move their expiries).
const KEYS_PER_SCAN = 1000

/** A glob that matches `prefix` and what follows it, whatever the prefix holds. */
const startingWith = (prefix: string): string => `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`

/** Every key under `prefix`, a batch of a SCAN at a time: SCAN reads the whole keyspace, KEYS_PER_SCAN at a call. */
export async function eachKeyBatch (redis: Redis, prefix: string, each: (keys: string[]) => Promise<void>): Promise<void> {
  const match = startingWith(prefix)
  let cursor = '0'
  do {
    const [next, keys] = await call(redis.scan(cursor, 'MATCH', match, 'COUNT', KEYS_PER_SCAN))
    if (keys.length > 0) await each(keys)
    cursor = next
  } while (cursor !== '0')
}

// ioredis has no hook for commands: each is timed on its way out, in the one method every command goes through.
export function timeCommands (redis: Redis, observe: (command: string, seconds: number) => void): void {
  const send = redis.sendCommand.bind(redis)
  redis.sendCommand = (command, stream) => {
    const started = performance.now()
    const settled = (): void => { observe(command.name, (performance.now() - started) / 1000) }
    command.promise.then(settled, settled)
    return send(command, stream)
  }
}
