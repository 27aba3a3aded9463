// The official client's resource-style methods (\`client.items.list(query)\`).
import { contractOperations, type JsonObject, type Resolve } from './contract.js'

interface ResourceOperation {
  readonly tag: string
  readonly operationId: string
  readonly method: string
  readonly path: string
  readonly pathParameters: readonly string[]
  readonly hasQuery: boolean
  readonly hasBody: boolean
  readonly summary: string
  /** Whether only a signed-in caller may call it (it has a security requirement). */
  readonly signedIn: boolean
}

/** The operations of the resources a client calls as methods: the tags whose every operation a signed-in caller makes. */
export function resourceOperations (document: JsonObject, resolve: Resolve): ResourceOperation[] {
  const found = [...contractOperations(document, resolve)].map(({ path, method, operation, parameters, security }): ResourceOperation => ({
    tag: Array.isArray(operation.tags) ? String(operation.tags[0]) : 'default',
    operationId: String(operation.operationId),
    method: method.toUpperCase(),
    path,
    pathParameters: parameters.filter((parameter) => parameter.in === 'path').map((parameter) => String(parameter.name)),
    hasQuery: parameters.some((parameter) => parameter.in === 'query'),
    hasBody: operation.requestBody !== undefined,
    summary: typeof operation.summary === 'string' ? operation.summary : String(operation.operationId),
    signedIn: security.length > 0
  }))
  const open = new Set(found.filter((operation) => !operation.signedIn).map((operation) => operation.tag))
  return found.filter((operation) => !open.has(operation.tag))
}

// A resource's method: its operation's name less the resource's noun (listItems on items: list).
const methodName = (operation: ResourceOperation): string => {
  const noun = operation.tag.replace(/s$/, '')
  return operation.operationId.replace(new RegExp(`${noun.charAt(0).toUpperCase()}${noun.slice(1)}s?$`), '')
}

/** The official client's resource-style methods (`client.items.list(query)`), each one typed call of openapi-fetch. */
export function resourcesModule (banner: string, operations: ResourceOperation[]): string {
  const tags = [...new Set(operations.map((operation) => operation.tag))]
  const method = (operation: ResourceOperation): string => {
    const types = `operations['${operation.operationId}']`
    const parameters = [
      ...operation.pathParameters.map((name) => `${name}: ${types}['parameters']['path']['${name}']`),
      ...(operation.hasBody ? [`body: NonNullable<${types}['requestBody']>['content']['application/json']`] : []),
      ...(operation.hasQuery ? [`query?: ${types}['parameters']['query']`] : []),
      'options: CallOptions = {}'
    ]
    const params = [
      ...(operation.pathParameters.length > 0 ? [`path: { ${operation.pathParameters.join(', ')} }`] : []),
      ...(operation.hasQuery ? ['query'] : [])
    ]
    const init = [
      ...(params.length > 0 ? [`params: { ${params.join(', ')} }`] : []),
      ...(operation.hasBody ? ['body'] : []),
      '...requestInit(options)'
    ]
    return `      /** ${operation.summary} (${operation.operationId}). */
      ${methodName(operation)}: async (${parameters.join(', ')}) => await send(api.${operation.method}('${operation.path}', { ${init.join(', ')} }))`
  }
  return `${banner}import type { Client } from 'openapi-fetch'
import type { operations, paths } from './openapi.js'

/** What each method takes beside the operation's own parameters. */
export interface CallOptions {
  /** false: sent once, whatever answers (a 429, a 503, a lost answer); the client's retries otherwise. */
  readonly retry?: false
  readonly signal?: AbortSignal
  readonly headers?: Readonly<Record<string, string>>
  /** Made only if the resource is still as read: the item the client gave (or its ETag) as \`If-Match\`; 412 otherwise. */
  readonly ifMatch?: object | string
  /**
   * The copy the caller holds (or its ETag) as \`If-None-Match\`: the service sends the resource only if it changed,
   * and the client answers with that copy when it did not.
   */
  readonly ifNoneMatch?: object | string
}

/** Turns a method's options into openapi-fetch's request options. */
export type RequestInit = (options: CallOptions) => { headers?: Record<string, string>, signal?: AbortSignal }
/** Gives a typed call's data, or throws the client's error. */
export type Send = <Data>(pending: Promise<{ data?: Data, error?: unknown, response: Response }>) => Promise<Data>

/** The resources of the contract (${tags.join(', ')}), each operation a method. */
export function resources (api: Client<paths>, send: Send, requestInit: RequestInit) {
  return {
${tags.map((tag) => `    ${tag}: {\n${operations.filter((operation) => operation.tag === tag).map(method).join(',\n')}\n    }`).join(',\n')}
  }
}
`
}
