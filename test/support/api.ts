// Requests into an app by operationId, each response checked against the contract, and the users tests register.
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import type { components } from '../../generated/openapi.js'
import { type RouteOperationId, routes } from '../../generated/routes.js'
import { assertMatchesContract } from './contract-checks.js'

export type Schemas = components['schemas']

export interface CallOptions {
  params?: Record<string, string>
  query?: Record<string, string | number>
  body?: unknown
  token?: string
  headers?: Record<string, string>
  /** The client's address, as the service sees it (127.0.0.1 when left out). */
  remoteAddress?: string
}

/**
 * Sends requests into the app and checks every response against the contract before a test sees it; under `base`
 * (a sandbox's, `/sandboxes/{sandboxId}`) when one is given, as a client bound to it sends them.
 */
export class Api {
  constructor (readonly app: FastifyInstance, readonly base = '') {}

  async inject (options: InjectOptions & { method: string, url: string }): Promise<LightMyRequestResponse> {
    const response = await this.app.inject({ ...options, url: this.base + options.url })
    assertMatchesContract(options.method, options.url, response)
    return response
  }

  /** Calls an operation by its operationId. */
  async call (operationId: RouteOperationId, options: CallOptions = {}): Promise<LightMyRequestResponse> {
    const route = routes.find((candidate) => candidate.operationId === operationId)
    if (route === undefined) throw new Error(`unknown operation ${operationId}`)
    const path = route.url.replace(/:([^/]+)/g, (_match, name: string) => encodeURIComponent(options.params?.[name] ?? ''))
    const query = new URLSearchParams(Object.entries(options.query ?? {}).map(([key, value]): [string, string] => [key, String(value)])).toString()
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    return await this.inject({
      method: route.method,
      url: query === '' ? path : `${path}?${query}`,
      headers,
      ...(options.remoteAddress === undefined ? {} : { remoteAddress: options.remoteAddress }),
      ...(options.body === undefined ? {} : { payload: options.body as object })
    })
  }

  async register (overrides: Partial<Schemas['RegisterRequest']> = {}): Promise<Schemas['AuthResponse']> {
    const response = await this.call('registerUser', { body: newUser(overrides) })
    if (response.statusCode !== 201) throw new Error(`register failed: ${response.body}`)
    return response.json()
  }

  async createItem (token: string, body: Schemas['CreateItemRequest'] = { name: 'An item' }): Promise<Schemas['Item']> {
    const response = await this.call('createItem', { token, body })
    if (response.statusCode !== 201) throw new Error(`createItem failed: ${response.body}`)
    return response.json()
  }
}

let userCount = 0
export function newUser (overrides: Partial<Schemas['RegisterRequest']> = {}): Schemas['RegisterRequest'] {
  userCount += 1
  return {
    email: `user${userCount}-${process.pid}@example.com`,
    password: 'correct horse battery staple',
    firstName: 'Test',
    lastName: `User ${userCount}`,
    role: 'contributor',
    ...overrides
  }
}

/**
 * The items of a RateLimit or RateLimit-Policy field (IETF draft-ietf-httpapi-ratelimit-headers-10), by limit name,
 * each with its parameters (`q`, `w`; `r`, `t`) as numbers.
 */
export function rateLimitItems (field: unknown): Record<string, Record<string, number>> {
  if (typeof field !== 'string') return {}
  return Object.fromEntries(field.split(', ').map((item) => {
    const [name = '', ...parameters] = item.split(';')
    return [JSON.parse(name) as string, Object.fromEntries(parameters.map((parameter) => {
      const [key = '', value] = parameter.split('=')
      return [key, Number(value)]
    }))]
  }))
}
