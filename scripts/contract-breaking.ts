// The gate against breaking clients: `npm run contract:breaking -- BASE` compares the working tree's openapi.yaml
// with BASE (a file, or a git ref whose openapi.yaml is read) and names every change that would break a client built
// against BASE. It fails on one unless the major version went up. Hand-written: of the packages that diff OpenAPI
// documents, Optic 1.0.9 passes a narrowed maxLength, openapi-diff refuses OpenAPI 3.1 and oasdiff is not on npm.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parse } from 'yaml'
import { compareSchemas, type Direction, type Document, isObject, resolve, type Schema } from './contract-breaking/schemas.js'

export type { Document }

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const

interface Operation {
  id: string
  where: string
  value: Schema
  /** Path-level parameters first, overridden by the operation's own, by `in` and name. */
  parameters: Map<string, Schema>
}

function operations (document: Document): Map<string, Operation> {
  const found = new Map<string, Operation>()
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const value = resolve(document, pathItem[method])
      if (!isObject(value)) continue
      const parameters = new Map<string, Schema>()
      for (const entry of [...(Array.isArray(pathItem.parameters) ? pathItem.parameters : []), ...(Array.isArray(value.parameters) ? value.parameters : [])]) {
        const parameter = resolve(document, entry)
        if (isObject(parameter)) parameters.set(`${String(parameter.in)} ${String(parameter.name)}`, parameter)
      }
      // Path templates name their parameters; a renamed one is the same path.
      const key = `${method.toUpperCase()} ${path.replace(/\{[^}]+\}/g, '{}')}`
      found.set(key, { id: String(value.operationId ?? key), where: `${method.toUpperCase()} ${path}`, value, parameters })
    }
  }
  return found
}

/** How a client writes a parameter into the request: its style and explode, the defaults of its `in` where unsaid. */
function serialization (parameter: Schema): string {
  const style = typeof parameter.style === 'string' ? parameter.style : parameter.in === 'query' || parameter.in === 'cookie' ? 'form' : 'simple'
  const explode = typeof parameter.explode === 'boolean' ? parameter.explode : style === 'form'
  return `style ${style}${explode ? ', exploded' : ''}`
}

/** The security a client must satisfy: one of these sets of schemes; an empty set means none. */
function securityOf (document: Document, operation: Schema): string[][] {
  const requirements = Array.isArray(operation.security) ? operation.security : document.security ?? []
  if (requirements.length === 0) return [[]]
  return requirements.map((requirement) => Object.keys(isObject(requirement) ? requirement : {}).sort())
}

const responsesOf = (document: Document, operation: Schema): Schema => {
  const responses = resolve(document, operation.responses)
  return isObject(responses) ? responses : {}
}

const jsonSchemaOf = (document: Document, holder: unknown): Map<string, unknown> => {
  const resolved = resolve(document, holder)
  const content = isObject(resolved) && isObject(resolved.content) ? resolved.content : {}
  return new Map(Object.entries(content).map(([mediaType, media]) => [mediaType, isObject(media) ? media.schema : undefined]))
}

function compareBodies (base: Document, head: Document, baseHolder: unknown, headHolder: unknown, where: string, direction: Direction): string[] {
  const found: string[] = []
  const headMedia = jsonSchemaOf(head, headHolder)
  for (const [mediaType, schema] of jsonSchemaOf(base, baseHolder)) {
    if (!headMedia.has(mediaType)) {
      found.push(`${where} ${mediaType}: ${direction === 'request' ? 'no longer accepted' : 'no longer sent'}`)
      continue
    }
    found.push(...compareSchemas(base, head, schema, headMedia.get(mediaType), `${where} ${mediaType}`, direction))
  }
  return found
}

function compareOperation (base: Document, head: Document, was: Operation, now: Operation): string[] {
  const where = `${now.where} (${was.id})`
  const found: string[] = []
  if (was.id !== now.id) found.push(`${was.where}: operationId ${was.id} renamed ${now.id}`)
  for (const [key, parameter] of was.parameters) {
    const current = now.parameters.get(key)
    if (current === undefined) {
      // A path parameter may be renamed with its template: the same position, another name.
      if (parameter.in !== 'path') found.push(`${where}: ${parameter.in} parameter ${String(parameter.name)} removed or renamed`)
      continue
    }
    if (current.required === true && parameter.required !== true) found.push(`${where}: ${current.in} parameter ${String(current.name)} now required`)
    const [wasSent, nowSent] = [serialization(parameter), serialization(current)]
    if (wasSent !== nowSent) found.push(`${where}: ${String(current.in)} parameter ${String(current.name)} serialized ${nowSent}, was ${wasSent}`)
    found.push(...compareSchemas(base, head, parameter.schema, current.schema, `${where}: ${String(current.in)} parameter ${String(current.name)}`, 'request'))
  }
  for (const [key, parameter] of now.parameters) {
    if (!was.parameters.has(key) && parameter.required === true && parameter.in !== 'path') found.push(`${where}: new required ${parameter.in} parameter ${String(parameter.name)}`)
  }
  const [baseBody, headBody] = [resolve(base, was.value.requestBody), resolve(head, now.value.requestBody)]
  if (isObject(headBody) && headBody.required === true && !(isObject(baseBody) && baseBody.required === true)) found.push(`${where}: request body now required`)
  if (isObject(baseBody) && isObject(headBody)) found.push(...compareBodies(base, head, baseBody, headBody, `${where}: request body`, 'request'))
  const [baseResponses, headResponses] = [responsesOf(base, was.value), responsesOf(head, now.value)]
  for (const [status, response] of Object.entries(baseResponses)) {
    if (!(status in headResponses)) {
      // An error status no longer declared breaks no client: it handles every status the operation may still send
      // (as oasdiff judges response-non-success-status-removed). The suite holds the service to that: every
      // response it sees must be one the contract declares (CONTRACT_STRICT_RESPONSES). A success removed is a
      // change of what the operation does.
      if (!isErrorStatus(status)) found.push(`${where}: response ${status} removed`)
      continue
    }
    found.push(...compareBodies(base, head, response, headResponses[status], `${where}: response ${status}`, 'response'))
    const [baseHeaders, headHeaders] = [resolve(base, response), resolve(head, headResponses[status])].map((value) => isObject(value) && isObject(value.headers) ? value.headers : {})
    for (const name of Object.keys(baseHeaders ?? {})) {
      if (!(name in (headHeaders ?? {}))) found.push(`${where}: response ${status} header ${name} removed`)
    }
  }
  const allowed = securityOf(base, was.value)
  for (const requirement of securityOf(head, now.value)) {
    if (!allowed.some((before) => requirement.every((scheme) => before.includes(scheme)))) {
      found.push(`${where}: security requirement ${requirement.length === 0 ? 'none' : requirement.join(' + ')} added`)
    }
  }
  return found
}

function compareWebhooks (base: Document, head: Document): string[] {
  const found: string[] = []
  const headWebhooks = head.webhooks ?? {}
  for (const [name, pathItem] of Object.entries(base.webhooks ?? {})) {
    const current = headWebhooks[name]
    if (current === undefined) {
      found.push(`webhook ${name}: removed`)
      continue
    }
    for (const method of METHODS) {
      const [was, now] = [resolve(base, pathItem[method]), resolve(head, current[method])]
      if (!isObject(was)) continue
      if (!isObject(now)) {
        found.push(`webhook ${name}: ${method.toUpperCase()} removed`)
        continue
      }
      // The service sends the event: to its receivers it is a response.
      found.push(...compareBodies(base, head, was.requestBody, now.requestBody, `webhook ${name}: payload`, 'response'))
    }
  }
  return found
}

/**
 * Whether an operation of the base may go without breaking its clients: it was deprecated, with a sunset day that
 * has passed by `today` (oasdiff's rule: clients were told on every response, and until when).
 */
function sunsetPassed (operation: Operation, today: string): boolean {
  const sunset = operation.value['x-sunset']
  return operation.value.deprecated === true && typeof sunset === 'string' && sunset < today
}

/** Every change in `head` that breaks a client built against `base`, one line each; `today` as YYYY-MM-DD. */
export function breakingChanges (base: Document, head: Document, today = new Date().toISOString().slice(0, 10)): string[] {
  const found: string[] = []
  const headOperations = operations(head)
  for (const [key, was] of operations(base)) {
    const now = headOperations.get(key)
    if (now === undefined) {
      if (!sunsetPassed(was, today)) {
        const why = was.value.deprecated === true ? typeof was.value['x-sunset'] === 'string' ? `before its sunset (${was.value['x-sunset']})` : 'with no sunset set' : 'without being deprecated first'
        found.push(`${was.where} (${was.id}): removed ${why}`)
      }
    } else {
      found.push(...compareOperation(base, head, was, now))
    }
  }
  found.push(...compareWebhooks(base, head))
  return found
}

const major = (version: string): number => Number(/^(\d+)\./.exec(version)?.[1] ?? Number.NaN)

/** Reads BASE: a file, or else a git ref whose openapi.yaml it is. */
/** A base named by the user that is neither a file nor a git ref with an openapi.yaml. */
export class UnknownBaseError extends Error {
  override name = 'UnknownBaseError'
}

export function readBase (base: string): Document {
  if (existsSync(base)) return parse(readFileSync(base, 'utf8')) as Document
  try {
    return parse(execFileSync('git', ['show', `${base}:openapi.yaml`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })) as Document
  } catch {
    throw new UnknownBaseError(`${base} is neither a file nor a git ref whose openapi.yaml can be read`)
  }
}

const isErrorStatus = (status: string): boolean => /^[45]/.test(status)

const changesText = (count: number): string => `${count} breaking change${count === 1 ? '' : 's'}`

/** The gate's verdict: exit status and what it prints. */
export function verdict (base: Document, head: Document, baseName: string): { status: number, lines: string[] } {
  const changes = breakingChanges(base, head)
  const versions = `${base.info.version} → ${head.info.version}`
  if (changes.length === 0) return { status: 0, lines: [`openapi.yaml (${head.info.version}) breaks no client of ${baseName} (${base.info.version})`] }
  const listed = changes.map((change) => `  ${change}`)
  if (major(head.info.version) > major(base.info.version)) {
    return { status: 0, lines: [`${changesText(changes.length)} against ${baseName}, allowed by the major version (${versions}):`, ...listed] }
  }
  return {
    status: 1,
    lines: [`${changesText(changes.length)} against ${baseName} (${versions}); make ${changes.length === 1 ? 'it' : 'them'} additive, or raise the major version:`, ...listed]
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const baseName = process.argv[2]
  if (baseName === undefined) {
    console.error('usage: npm run contract:breaking -- BASE   (a released contract, e.g. contracts/1.0.0.yaml, or a git ref, e.g. v1.0.0)')
    process.exit(2)
  }
  let base: Document
  try {
    base = readBase(baseName)
  } catch (error) {
    if (!(error instanceof UnknownBaseError)) throw error
    console.error(`${error.message}; usage: npm run contract:breaking -- BASE`)
    process.exit(2)
  }
  const { status, lines } = verdict(base, parse(readFileSync('openapi.yaml', 'utf8')) as Document, baseName)
  for (const line of lines) (status === 0 ? console.log : console.error)(line)
  process.exitCode = status
}
