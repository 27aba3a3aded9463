// The bounds the service is measured against: bare Fastify answering fixed payloads with the contract's schemas
// (so the same validators' rules and the same serializers). The list answers a page of items, as a page does in the
// service; the get, create and edit answer one item, after validating the same path parameter and body as the
// service does. BASELINE=jwt adds the usual auth setup, `await request.jwtVerify()` in onRequest; BASELINE=usual
// adds @fastify/rate-limit to it as it is usually set up (one limit per client address on every route, its three
// x-ratelimit-* headers on every response; its quota out of the benchmark's reach, as the service's are);
// BASELINE=logger adds only Fastify's logger at the service's benchmark level, which writes no line per request.
// BASELINE=redis serves the list and the get from the Redis store's keys (REDIS_URL, REDIS_KEY_PREFIX) with ioredis,
// by the store's own page script, sending the texts Redis holds; BASELINE=redis-parsed parses them and has the
// contract's serializer write them again, as a Fastify user writes such a route. Both also create and edit items
// under keys of their own (REDIS_KEY_PREFIX then `anchor:`), the body validated with the contract's schema and the
// item stored by one EVALSHA each: the least a write on Redis costs, as a Fastify user writes it. BASELINE=redis-usual
// serves those with the usual setup in front, its rate limit counted in the same Redis (@fastify/rate-limit's Redis
// store, under REDIS_KEY_PREFIX then `anchor:`): what a Fastify user usually writes for an authenticated, limited write.
// As in the service, first of all: one of Node's tick objects kept alive, so that neither server is measured in the
// slower state Node falls into at random otherwise (src/runtime/tick-object-pin.ts).
import '../../src/runtime/tick-object-pin.js'
import fastifyJwt from '@fastify/jwt'
import fastifyRateLimit from '@fastify/rate-limit'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis, type Result } from 'ioredis'
import type { components } from '../../generated/openapi.js'
import { type RouteOperationId, routes } from '../../generated/routes.js'
import { schemas } from '../../generated/schemas.js'
import { newItem } from '../../src/domain/records.js'
import { itemScripts } from '../../src/store/redis/items.js'
import { redisKeys } from '../../src/store/redis/keys.js'

const app = Fastify({ logger: process.env.BASELINE === 'logger' ? { level: 'warn' } : false })
// The route table's schemas refer to the contract's component schemas by $id, as in the service.
for (const schema of Object.values(schemas)) app.addSchema(schema)

const routeOf = (operationId: RouteOperationId): typeof routes[number] => {
  const route = routes.find((candidate) => candidate.operationId === operationId)
  if (route === undefined) throw new Error(`The contract has no ${operationId}`)
  return route
}

function answerFixedPayloads (app: FastifyInstance): void {
  const page = JSON.parse(process.env.BASELINE_PAGE ?? '{}') as { data: unknown[] }
  const item = page.data[0]
  // The list keeps to the bare minimum: no query validation, the response schema only.
  const answers: Array<{ operationId: RouteOperationId, status: number, payload: unknown, validate: boolean }> = [
    { operationId: 'listItems', status: 200, payload: page, validate: false },
    { operationId: 'getItem', status: 200, payload: item, validate: true },
    { operationId: 'createItem', status: 201, payload: item, validate: true },
    { operationId: 'updateItem', status: 200, payload: item, validate: true }
  ]
  for (const { operationId, status, payload, validate } of answers) {
    const { method, url, schema: { params, body, response } } = routeOf(operationId)
    app.route({
      method,
      url,
      schema: {
        ...(validate && params !== undefined ? { params } : {}),
        ...(validate && body !== undefined ? { body } : {}),
        response: { [status]: response[status] }
      },
      handler: async (_request, reply) => await reply.code(status).send(payload)
    })
  }
}

const JSON_CONTENT = 'application/json; charset=utf-8'
const LIST_HEAD = Buffer.from('{"data":[')
const COMMA = Buffer.from(',')

// The first page of twenty, as the benchmark asks for it, from the bytes Redis answers; the get validates its path
// parameter, as the service does.
function answerFromRedis (app: FastifyInstance, redis: Redis, parsed: boolean): void {
  const keys = redisKeys(String(process.env.REDIS_KEY_PREFIX))
  redis.defineCommand('pageItems', itemScripts.pageItems)
  const list = routeOf('listItems')
  app.route({
    method: list.method,
    url: list.url,
    schema: { response: { 200: list.schema.response[200] } },
    handler: async (_request, reply) => {
      const [total, ...texts] = await redis.pageItemsBuffer(keys.items, keys.itemOrder, 0, 19)
      const pagination = { page: 1, pageSize: 20, total }
      if (parsed) return await reply.send({ data: texts.map((text) => JSON.parse(String(text))), pagination })
      const items = texts.filter((text) => text !== null).flatMap((text, index) => index === 0 ? [text] : [COMMA, text])
      const tail = Buffer.from(`],"pagination":${JSON.stringify(pagination)}}`)
      return await reply.type(JSON_CONTENT).send(Buffer.concat([LIST_HEAD, ...items, tail]))
    }
  })
  const get = routeOf('getItem')
  app.route<{ Params: { itemId: string } }>({
    method: get.method,
    url: get.url,
    schema: { params: get.schema.params, response: { 200: get.schema.response[200] } },
    handler: async (request, reply) => {
      const text = await redis.hgetBuffer(keys.items, request.params.itemId)
      if (text === null) return await reply.code(404).send()
      if (parsed) return await reply.send(JSON.parse(String(text)))
      return await reply.type(JSON_CONTENT).send(text)
    }
  })
  const anchorItems = `${String(process.env.REDIS_KEY_PREFIX)}anchor:items`
  const anchorOrder = `${String(process.env.REDIS_KEY_PREFIX)}anchor:item-order`
  redis.defineCommand('addAnchorItem', { numberOfKeys: 2, lua: ANCHOR_ADD })
  redis.defineCommand('editAnchorItem', { numberOfKeys: 1, lua: ANCHOR_EDIT })
  const create = routeOf('createItem')
  app.route<{ Body: components['schemas']['CreateItemRequest'] }>({
    method: create.method,
    url: create.url,
    schema: { body: create.schema.body },
    handler: async (request, reply) => {
      const item = newItem(request.body, ANCHOR_CONTRIBUTOR, Date.now())
      const text = JSON.stringify(item)
      await redis.addAnchorItem(anchorItems, anchorOrder, item.id, text)
      return await reply.code(201).type(JSON_CONTENT).send(text)
    }
  })
  const edit = routeOf('updateItem')
  app.route<{ Params: { itemId: string }, Body: components['schemas']['UpdateItemRequest'] }>({
    method: edit.method,
    url: edit.url,
    schema: { params: edit.schema.params, body: edit.schema.body },
    handler: async (request, reply) => {
      const text = await redis.editAnchorItem(anchorItems, request.params.itemId, JSON.stringify(request.body), new Date().toISOString())
      if (text === null) return await reply.code(404).send()
      return await reply.type(JSON_CONTENT).send(text)
    }
  })
}

const ANCHOR_CONTRIBUTOR = '00000000-0000-4000-8000-000000000000'
// KEYS: the items, their order. ARGV: the id, the item's text.
const ANCHOR_ADD = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1`
// KEYS: the items. ARGV: the id, the change's text, updatedAt. The item's text as changed, or nil when there is none.
const ANCHOR_EDIT = `
local text = redis.call('HGET', KEYS[1], ARGV[1])
if not text then return false end
local item = cjson.decode(text)
for name, value in pairs(cjson.decode(ARGV[2])) do item[name] = value end
item.updatedAt = ARGV[3]
local changed = cjson.encode(item)
redis.call('HSET', KEYS[1], ARGV[1], changed)
return changed`

declare module 'ioredis' {
  interface RedisCommander<Context> {
    addAnchorItem (items: string, order: string, id: string, text: string): Result<1, Context>
    editAnchorItem (items: string, id: string, change: string, updatedAt: string): Result<string | null, Context>
  }
}

const baseline = String(process.env.BASELINE)
if (['jwt', 'usual', 'redis-usual'].includes(baseline)) {
  await app.register(fastifyJwt, { secret: String(process.env.JWT_SECRET) })
  app.addHook('onRequest', async (request) => { await request.jwtVerify() })
}
if (['redis', 'redis-parsed', 'redis-usual'].includes(baseline)) {
  const redis = new Redis(String(process.env.REDIS_URL))
  app.addHook('onClose', () => { redis.disconnect() })
  if (baseline === 'redis-usual') {
    await app.register(fastifyRateLimit, { max: 1_000_000_000, timeWindow: 60_000, redis, nameSpace: `${String(process.env.REDIS_KEY_PREFIX)}anchor:rate-limit:` })
  }
  answerFromRedis(app, redis, baseline === 'redis-parsed')
} else {
  if (baseline === 'usual') await app.register(fastifyRateLimit, { max: 1_000_000_000, timeWindow: 60_000 })
  answerFixedPayloads(app)
}

const address = await app.listen({ host: '127.0.0.1', port: 0 })
console.log(`listening at ${address}`)
process.on('SIGTERM', () => { void app.close() })
