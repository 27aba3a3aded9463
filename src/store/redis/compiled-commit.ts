// A change of a few steps committed by a script of its shape's own: what the decoded commit (commit.ts) does for that
// shape, written out in Lua once, so that Redis decodes nothing and looks nothing up.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Script } from './commands.js'
import { APPEND_EVENT } from './outbox.js'
import { writeScript } from './writes.js'

// In a change, a value is the index of the ARGV that holds it, once the script has taken off what comes before:
// neither cjson nor a compiled script's text holds anything a user wrote, nor a figure that differs from one write to
// the next.
export type ValueIndex = number

/** What `commit` answers when a guard or a bound refused the change: 0 for stale, unless the guard names another. */
export type Refused = number | string

/** What `commit` answers when a guard that answers what it finds (Change.guardAsRead, guardVacant) refused the change: that, null for none. */
export type Held = [held: string | null]

// A guard's expected `true` is PRESENT (commit.ts): any value. One `answersHeld` refuses with what the field holds.
export type Guard = [key: number, field: ValueIndex | false, expected: ValueIndex | false | true, refused: Refused, answersHeld: boolean]
export type CommandArgument = ValueIndex | { at: ValueIndex } | { after: ValueIndex } | { command: number } | { score: [key: number, member: ValueIndex] }
export type Command = [name: string, key: number, ...CommandArgument[]]
export type Count = [key: number, field: ValueIndex, by: ValueIndex, most: ValueIndex | false, refused: Refused, afterLimit: boolean, rising: boolean]
export type ChangeEvent = [outbox: number, ...ValueIndex[]] | false

/** A change (commit.ts's Change) in the form its scripts take: each key and value by its index. */
export interface ChangeParts {
  readonly guards: readonly Guard[]
  readonly commands: readonly Command[]
  readonly counts: readonly Count[]
  readonly event: ChangeEvent
}

// A change of more steps than this is committed by the decoded commit: its shape varies with what it carries (an
// account's removal, every item and record of it), and a compiled script Redis keeps for each would have no bound.
const MOST_COMPILED_STEPS = 48
// The compiled commits one process keeps, and Redis with it for each version of the service: the shapes the rules
// make are fewer; past them, a change is committed by the decoded commit.
const MOST_COMPILED_COMMITS = 256

export interface CompiledCommit extends Script {
  readonly sha: string
}

// By a change's shape: undefined for a shape that is not compiled.
const compiledCommits = new Map<string, CompiledCommit | undefined>()

/** The commits of changes compiled by this process so far, each Redis keeps by its SHA-1 once it has run it. */
export const compiledCommitScripts = (): Iterable<Script> => [...compiledCommits.values()].filter((compiled) => compiled !== undefined)

/**
 * The compiled commit of a change of these parts, whose structure (Change.structure) is its shape: the same for every
 * change a rule makes at one place. Undefined for a change the decoded commit makes.
 */
export function compiledCommit (parts: ChangeParts, structure: string): CompiledCommit | undefined {
  if (parts.guards.length + parts.commands.length + parts.counts.length > MOST_COMPILED_STEPS) return undefined
  if (compiledCommits.has(structure) || compiledCommits.size === MOST_COMPILED_COMMITS) return compiledCommits.get(structure)
  const lua = compiledChange(parts)
  const compiled = lua === undefined ? undefined : { lua, sha: createHash('sha1').update(lua).digest('hex') }
  compiledCommits.set(structure, compiled)
  return compiled
}

// A refusal or a command's name as a Lua literal: each is the code's own constant (plain words), never a user's text.
const literal = (constant: Refused): string => JSON.stringify(constant)

// In a compiled commit, the write's own keys and values stay in place (writeScript's `place`) before the change's:
// the write limit's counter is KEYS[1]; the deadline, the outcome key and the limit's max and window ARGV[1] to 4.
const key = (index: number): string => `KEYS[${index + 1}]`
const value = (index: ValueIndex): string => `ARGV[${index + 4}]`

// What the decoded commit's loop does for a change of this shape, written out: the same guards, commands and event
// in the same order, with nothing left to decode or to look up, and each count added by HINCRBY where the loop reads
// it and sets it (taken back when the change is refused after it). Undefined when a command writes a key a count
// does, or two counts one field: the loop sets each count after every command, from what it read before any.
export function compiledChange ({ guards, commands, counts, event }: ChangeParts): string | undefined {
  const countedKeys = new Set(counts.map(([countKey]) => countKey))
  const countedFields = new Set(counts.map(([countKey, field]) => `${countKey} ${field}`))
  if (countedFields.size < counts.length || commands.some(([, commandKey]) => countedKeys.has(commandKey))) return undefined
  const lines: string[] = []
  for (const [guarded, field, expected, refused, answersHeld] of guards) {
    const [command, fieldArgument] = field === false ? ['GET', ''] : ['HGET', `, ${value(field)}`]
    const held = `redis.call('${command}', ${key(guarded)}${fieldArgument})`
    const refuse = `return refuse(${literal(refused)})`
    if (expected === true) lines.push(`if redis.call('HEXISTS', ${key(guarded)}${fieldArgument}) == 0 then ${refuse} end`)
    else if (expected === false && answersHeld) lines.push(`do local held = ${held} if held then return refuse({held}) end end`)
    else if (expected === false) lines.push(`if ${held} then ${refuse} end`)
    else if (answersHeld) lines.push(`do local held = ${held} if held ~= ${value(expected)} then return refuse({held}) end end`)
    else lines.push(`if ${held} ~= ${value(expected)} then ${refuse} end`)
  }
  if (counts.length > 0) lines.push("local function undo (key, field, by) if redis.call('HINCRBY', key, field, -by) <= 0 then redis.call('HDEL', key, field) end end")
  const undone = (upTo: number): string => counts.slice(0, upTo + 1).map(([counted, field, by]) => `undo(${key(counted)}, ${value(field)}, ${value(by)}) `).join('')
  const passed = ([, , , most, refused, , rising]: Count, index: number, undoing: string): string[] =>
    most === false || !rising ? [] : [`if count${index} > tonumber(${value(most)}) then ${undoing}return refuse(${literal(refused)}) end`]
  counts.forEach((count, index) => {
    lines.push(`local count${index} = redis.call('HINCRBY', ${key(count[0])}, ${value(count[1])}, ${value(count[2])})`)
    if (!count[5]) lines.push(...passed(count, index, undone(index)))
  })
  const all = undone(counts.length - 1)
  lines.push(`if overLimit() then ${all}return refuse(-1) end`)
  counts.forEach((count, index) => { if (count[5]) lines.push(...passed(count, index, all)) })
  const answered = new Set(commands.flatMap(([, , ...args]) => args.flatMap((arg) => typeof arg === 'object' && 'command' in arg ? [arg.command] : [])))
  commands.forEach(([name, commandKey, ...args], index) => {
    const call = `redis.call(${literal(name)}, ${key(commandKey)}${args.map((arg) => `, ${argumentOf(arg)}`).join('')})`
    // A number as a text once: Redis formats a number it is given each time it is given one.
    lines.push(answered.has(index + 1) ? `local answer${index + 1} = tostring(${call})` : call)
  })
  counts.forEach(([counted, field], index) => { lines.push(`if count${index} <= 0 then redis.call('HDEL', ${key(counted)}, ${value(field)}) end`) })
  if (event !== false) lines.push(`appendEvent(${key(event[0])}, {${event.slice(1).map(value).join(', ')}})`)
  lines.push('return 1')
  return writeScript(event === false ? '' : APPEND_EVENT, lines.join('\n'), { limited: true, place: 'in place' })
}

function argumentOf (argument: CommandArgument): string {
  if (typeof argument === 'number') return value(argument)
  if ('at' in argument) return `tonumber(${value(argument.at)}) - clockAhead`
  if ('after' in argument) return `now + tonumber(${value(argument.after)})`
  if ('command' in argument) return `answer${argument.command}`
  return `redis.call('ZSCORE', ${key(argument.score[0])}, ${value(argument.score[1])})`
}

// Redis answers NOSCRIPT to a script's SHA-1 it does not hold: nothing ran, and the script is sent whole.
const missing = (error: unknown): boolean => error instanceof Error && error.message.startsWith('NOSCRIPT')

// The compiled commits sent whole on each connection. As ioredis does for the scripts it is given, the first send of
// one on a connection is its text (EVAL): a server that has not run it (a fresh one, one restarted, a new primary
// after a failover) never answers NOSCRIPT, which would send it again behind the WAIT that counts its replicas.
const sentWhole = new WeakMap<object, Set<string>>()

/** The reply of a compiled commit, sent with its keys and arguments. */
export async function evaluate (redis: Redis, { lua, sha }: CompiledCommit, numberOfKeys: number, keysAndArguments: Array<string | number>): Promise<unknown> {
  let sent = sentWhole.get(redis.stream)
  if (sent === undefined) sentWhole.set(redis.stream, sent = new Set())
  if (!sent.has(sha)) {
    sent.add(sha)
    return await redis.eval(lua, numberOfKeys, ...keysAndArguments)
  }
  return await redis.evalsha(sha, numberOfKeys, ...keysAndArguments).catch(async (error: unknown) => {
    if (!missing(error)) throw error
    return await redis.eval(lua, numberOfKeys, ...keysAndArguments)
  })
}
