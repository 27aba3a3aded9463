// Property-based fuzzing of every operation with requests generated from the contract's schemas, valid and
// mutated. FUZZ_RUNS (default 150 per operation) and FUZZ_SEED set the run; `npm run fuzz` runs a longer one.
// A failure prints the seed and the shrunk counterexample, so it can be replayed with FUZZ_SEED.
import fc from 'fast-check'
import t from 'tap'
import { type JsonSchema, type RouteDefinition, type RouteOperationId, routes } from '../generated/routes.js'
import { operationValidators } from '../generated/validators.js'
import { mutated, valid } from './support/arbitraries.js'
import { type Schemas } from './support/api.js'
import { build } from './support/app.js'

const SEED = Number(process.env.FUZZ_SEED ?? 20261121)
const RUNS = Number(process.env.FUZZ_RUNS ?? 150)
const EXISTING_ITEM = 'an item the caller owns'

// What a request the contract accepts, from a signed-in contributor, may get. Fuzzed emails, passwords and
// refresh tokens are random, so sign-in and refresh mostly fail; random item ids mostly do not exist.
const outcomesOfValidRequests: Record<RouteOperationId, number[]> = {
  openDocs: [302],
  checkLiveness: [200],
  checkReadiness: [200],
  registerUser: [201, 409],
  loginUser: [200, 401],
  refreshTokens: [200, 401],
  logoutUser: [204],
  listItems: [200],
  createItem: [201],
  getItem: [200, 404],
  updateItem: [200, 404],
  deleteItem: [204, 404]
}

interface FuzzedRequest {
  body?: unknown
  query?: Record<string, unknown>
  params?: Record<string, unknown>
}

// Path and query parameters reach the service as strings; each one is valid or mutated on its own.
function parameters (schema: JsonSchema | undefined, itemIds: fc.Arbitrary<unknown>): fc.Arbitrary<Record<string, unknown>> | undefined {
  if (schema === undefined) return undefined
  const properties = schema.properties as Record<string, JsonSchema>
  return fc.record(Object.fromEntries(Object.entries(properties).map(([name, property]) =>
    [name, name === 'itemId' ? itemIds : fc.oneof(valid(property), mutated(property))])),
  { requiredKeys: (schema.required as string[] | undefined) ?? [] })
}

function requests (route: RouteDefinition): fc.Arbitrary<FuzzedRequest> {
  const itemId = route.schema.params?.properties as Record<string, JsonSchema> | undefined
  const itemIds = fc.oneof(fc.constant(EXISTING_ITEM), valid(itemId?.itemId ?? {}), mutated(itemId?.itemId ?? {}))
  const parts: Record<string, fc.Arbitrary<unknown>> = {}
  if (route.schema.body !== undefined) parts.body = fc.oneof(valid(route.schema.body), mutated(route.schema.body))
  const query = parameters(route.schema.querystring, itemIds)
  const params = parameters(route.schema.params, itemIds)
  if (query !== undefined) parts.query = query
  if (params !== undefined) parts.params = params
  return fc.record(parts) as fc.Arbitrary<FuzzedRequest>
}

// A parameter that is not a primitive reaches a URL as text; JSON says what a client library would send.
const asStrings = (values: Record<string, unknown> = {}): Record<string, string> =>
  Object.fromEntries(Object.entries(values).map(([name, value]) =>
    [name, typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value)]))

// Whether the contract accepts the request as the service receives it (parameters as strings).
function isValid (route: RouteDefinition, request: { body?: unknown, query: Record<string, string>, params: Record<string, string> }): boolean {
  const check = (part: 'body' | 'querystring' | 'params', value: unknown): boolean => {
    const validate = operationValidators[route.operationId][part]
    return validate === undefined || validate(structuredClone(value))
  }
  return check('body', request.body) && check('querystring', request.query) && check('params', request.params)
}

t.test('what the generator makes for valid is valid: every request body it makes as valid, the contract accepts', async (t) => {
  for (const route of routes.filter((route) => route.schema.body !== undefined)) {
    const validate = operationValidators[route.operationId].body
    fc.assert(fc.property(valid(route.schema.body ?? {}), (body) => validate?.(structuredClone(body)) === true), { seed: SEED, numRuns: RUNS })
    t.pass(`${route.operationId}: ${RUNS} bodies, each valid`)
  }
})

t.test(`fuzzing every operation, ${RUNS} cases each, seed ${SEED}`, async (t) => {
  // One contributor makes every case's items, the largest the contract allows: a quota they never reach.
  const api = await build(t, { ACCOUNT_QUOTA_KIB: '1048576' })
  const contributor = await api.register()
  const ownedItem = async (): Promise<Schemas['Item']> => await api.createItem(contributor.accessToken)

  for (const route of routes) {
    t.test(route.operationId, async (t) => {
      await fc.assert(fc.asyncProperty(requests(route), async (request) => {
        const params = asStrings(request.params)
        const item = params.itemId === EXISTING_ITEM ? await ownedItem() : undefined
        if (item !== undefined) params.itemId = item.id
        const query = asStrings(request.query)
        // Signing out ends the session, so each case signs out of a session of its own.
        const token = route.operationId === 'logoutUser'
          ? (await api.app.tokens.open(api.app.store, contributor.user.id)).accessToken
          : contributor.accessToken
        // The helper checks the response against the contract (status declared, headers, body schema).
        const response = await api.call(route.operationId, { token, params, query, ...(request.body === undefined ? {} : { body: request.body }) })
        if (response.statusCode >= 500) throw new Error(`${route.operationId} answered ${response.statusCode}: ${response.body}`)
        if (isValid(route, { body: request.body, query, params }) && !outcomesOfValidRequests[route.operationId].includes(response.statusCode)) {
          throw new Error(`a valid ${route.operationId} request got ${response.statusCode}: ${response.body}`)
        }
        if (item !== undefined && route.operationId === 'updateItem' && response.statusCode !== 200) {
          const after = await api.call('getItem', { token, params: { itemId: item.id } })
          if (after.body !== JSON.stringify(item)) throw new Error(`a failed edit changed the item: ${after.body}`)
        }
      }), { seed: SEED, numRuns: RUNS })
      t.pass(`${RUNS} cases, never a 5xx, every response as the contract says`)
    })
  }

  t.test('afterwards every item still has its owner and the catalogue adds up', async (t) => {
    const seen = new Set<string>()
    let total = 0
    for (let page = 1; ; page += 1) {
      const list = (await api.call('listItems', { token: contributor.accessToken, query: { page, pageSize: 100 } })).json()
      total = list.pagination.total
      for (const item of list.data as Array<Schemas['Item']>) {
        seen.add(item.id)
        if (item.contributorId !== contributor.user.id) t.fail(`item ${item.id} has owner ${item.contributorId}`)
      }
      if (list.data.length < 100) break
    }
    t.equal(seen.size, total, 'walking the pages yields every item once')
    t.ok(total > 0)
  })
})
