// A deprecated operation of a fixture contract (test/fixtures/contracts/base.yaml's getThing, marked deprecated
// here): the generator carries its dates into the route table, and the pipeline's step answers every response of
// it with Deprecation, Sunset and Link, counting each call; an operation that is not deprecated carries none.
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'
import t from 'tap'
import { parse } from 'yaml'
import { routes } from '../../generated/routes.js'
import { routeTableOf } from '../../scripts/generate/route-table.js'
import { deprecationStep } from '../../src/pipeline/deprecation.js'
import { prometheusMetrics } from '../../src/observability/prometheus.js'

const base = parse(readFileSync('test/fixtures/contracts/base.yaml', 'utf8')) as { paths: Record<string, Record<string, Record<string, unknown>>> }

t.test('the generator carries deprecated, x-deprecated-at and x-sunset into the route table as the fields\' values', async (t) => {
  const contract = structuredClone(base)
  Object.assign(contract.paths['/things/{thingId}']!.get!, { deprecated: true, 'x-deprecated-at': '2026-11-01', 'x-sunset': '2027-06-30' })
  const table = await routeTableOf(contract)
  t.same(table.find((route) => route.operationId === 'getThing')?.deprecation, {
    deprecation: '@1793491200',
    sunset: 'Wed, 30 Jun 2027 00:00:00 GMT',
    link: '</docs/#/default/getThing>; rel="deprecation"; type="text/html"'
  })
  t.equal(table.find((route) => route.operationId === 'addThing')?.deprecation, undefined, 'not on the others')
  Object.assign(contract.paths['/things/{thingId}']!.get!, { 'x-sunset': '30 June 2027' })
  await t.rejects(routeTableOf(contract), /getThing: x-sunset must be a date \(YYYY-MM-DD\)/, 'a date it cannot read stops the generator')
  Object.assign(contract.paths['/things/{thingId}']!.get!, { deprecated: false, 'x-sunset': '2027-06-30' })
  await t.rejects(routeTableOf(contract), /getThing: x-sunset and x-deprecated-at need deprecated: true/)
  t.same(routes.filter((route) => route.deprecation !== undefined).map((route) => route.operationId), [], 'no operation of openapi.yaml is deprecated yet')
})

t.test('every response of a deprecated operation, errors included, says so; each call is counted by operation', async (t) => {
  const contract = structuredClone(base)
  Object.assign(contract.paths['/things/{thingId}']!.get!, { deprecated: true, 'x-deprecated-at': '2026-11-01', 'x-sunset': '2027-06-30' })
  const table = await routeTableOf(contract)
  const metrics = prometheusMetrics()
  const step = deprecationStep(metrics)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  for (const route of table.filter(({ method }) => method === 'GET')) {
    app.route({
      method: 'GET',
      url: route.url,
      onSend: [...(step(route)?.onSend ?? [])],
      handler: async (request, reply) => {
        const { thingId } = request.params as { thingId?: string }
        if (thingId === 'broken') throw new Error('a bug')
        return thingId === 'missing' ? await reply.code(404).send({ code: 'NOT_FOUND' }) : { id: thingId ?? 'all' }
      }
    })
  }
  for (const [thingId, status] of [['one', 200], ['missing', 404], ['broken', 500]] as const) {
    const response = await app.inject({ method: 'GET', url: `/things/${thingId}` })
    t.equal(response.statusCode, status)
    t.match(response.headers, { deprecation: '@1793491200', sunset: 'Wed, 30 Jun 2027 00:00:00 GMT', link: '</docs/#/default/getThing>; rel="deprecation"; type="text/html"' }, `on a ${status}`)
  }
  const listed = await app.inject({ method: 'GET', url: '/things' })
  t.same([listed.headers.deprecation, listed.headers.sunset, listed.headers.link], [undefined, undefined, undefined], 'an operation not deprecated carries none')
  t.match((await metrics.exposition()).text, 'items_service_deprecated_calls_total{operation="getThing"} 3')
})
