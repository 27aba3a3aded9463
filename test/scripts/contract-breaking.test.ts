// The gate against breaking clients (scripts/contract-breaking.ts): each kind of breaking change to a fixture
// contract is named, each additive one passes, and the working tree's openapi.yaml breaks no client of the last
// released contract (contracts/<version>.yaml), as `npm run contract:breaking` says.
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import t from 'tap'
import { Document as YamlDocument, parse } from 'yaml'
import { breakingChanges, type Document, verdict } from '../../scripts/contract-breaking.js'
import { changedFixture, type Edit, fixture, limitParameter, parameters, post, schema, thingPath } from '../support/contract-fixture.js'

const base = fixture()
const changed = changedFixture

const breaking: Record<string, [change: Edit, named: RegExp]> = {
  'an operation removed': [(c) => { c.deleteIn(post()) }, /^POST \/things \(addThing\): removed without being deprecated first$/],
  'an operation renamed': [(c) => { c.setIn(post('operationId'), 'createThing') }, /operationId addThing renamed createThing/],
  'a path renamed': [(c) => { c.setIn(['paths', '/items/{thingId}'], c.getIn(thingPath())); c.deleteIn(thingPath()) }, /^GET \/things\/\{thingId\} \(getThing\): removed without being deprecated first$/],
  'a parameter removed': [(c) => { c.deleteIn(limitParameter()) }, /query parameter limit removed or renamed/],
  'a parameter renamed': [(c) => { c.setIn(limitParameter('name'), 'max') }, /query parameter limit removed or renamed/],
  'a success status removed': [(c) => { c.setIn(post('responses', '200'), c.getIn(post('responses', '201'))); c.deleteIn(post('responses', '201')) }, /addThing\): response 201 removed/],
  'a new required request field': [(c) => { c.addIn(schema('NewThing', 'required'), 'kind') }, /request body application\/json\.kind: newly required/],
  'a new required parameter': [(c) => { c.addIn(parameters, { name: 'owner', in: 'query', required: true, schema: { type: 'string' } }) }, /new required query parameter owner/],
  'a parameter made required': [(c) => { c.setIn(limitParameter('required'), true) }, /query parameter limit now required/],
  'a maxLength narrowed': [(c) => { c.setIn(schema('NewThing', 'properties', 'name', 'maxLength'), 100) }, /\.name: maxLength narrowed from 200 to 100/],
  'a minimum narrowed': [(c) => { c.setIn(limitParameter('schema', 'minimum'), 10) }, /parameter limit: minimum narrowed from 1 to 10/],
  'a maximum narrowed': [(c) => { c.setIn(limitParameter('schema', 'maximum'), 50) }, /parameter limit: maximum narrowed from 100 to 50/],
  'a pattern added': [(c) => { c.setIn(schema('NewThing', 'properties', 'note', 'pattern'), '^[a-z]+$') }, /\.note: pattern added/],
  'an enum value removed': [(c) => { c.setIn(schema('NewThing', 'properties', 'kind', 'enum'), ['small']) }, /\.kind: enum no longer accepts "large"/],
  'a request field no longer accepted': [(c) => { c.deleteIn(schema('NewThing', 'properties', 'note')) }, /\.note: no longer accepted/],
  'a request type changed': [(c) => { c.setIn(schema('NewThing', 'properties', 'note', 'type'), 'integer') }, /\.note: type "string" is now "integer"/],
  'a response field removed': [(c) => { c.deleteIn(schema('Thing', 'properties', 'kind')); c.setIn(schema('Thing', 'required'), ['id', 'name']) }, /response 200 application\/json\.kind: removed/],
  'a response field made optional': [(c) => { c.setIn(schema('Thing', 'required'), ['id', 'name']) }, /response 201 application\/json\.kind: no longer required/],
  'a response field made nullable': [(c) => { c.setIn(schema('Thing', 'properties', 'name', 'type'), ['string', 'null']) }, /\.name: type "string" is now "string", "null" \(nullable\)/],
  'a response type changed': [(c) => { c.setIn(schema('Thing', 'properties', 'size', 'type'), 'string') }, /\.size: type "integer" is now "string"/],
  'a response limit widened': [(c) => { c.setIn(schema('Thing', 'properties', 'name', 'maxLength'), 300) }, /response 200 application\/json\.name: maxLength widened from 200 to 300/],
  'a response format dropped': [(c) => { c.deleteIn(schema('Thing', 'properties', 'id', 'format')) }, /\.id: format no longer promised \(was "uuid"\)/],
  'a response format changed': [(c) => { c.setIn(schema('Thing', 'properties', 'id', 'format'), 'uri') }, /\.id: format changed from "uuid" to "uri"/],
  'a parameter serialized otherwise': [(c) => { c.setIn(thingPath('parameters', 0, 'style'), 'matrix') }, /path parameter thingId serialized style matrix, was style simple/],
  'a query parameter no longer exploded': [(c) => { c.setIn(limitParameter('explode'), false) }, /query parameter limit serialized style form, was style form, exploded/],
  'a response header removed': [(c) => { c.deleteIn(post('responses', '201', 'headers')) }, /response 201 header Location removed/],
  'a security requirement added': [(c) => { c.deleteIn(thingPath('get', 'security')) }, /getThing\): security requirement bearerAuth added/],
  'an event payload field removed': [(c) => { c.deleteIn(schema('Event', 'properties', 'type')); c.setIn(schema('Event', 'required'), ['id']) }, /webhook thing\.added: payload application\/json\.type: removed/],
  'an event removed': [(c) => { c.deleteIn(['webhooks', 'thing.added']) }, /webhook thing\.added: removed/],
  'a value added to a response enum': [(c) => { c.addIn(schema('Thing', 'properties', 'kind', 'enum'), 'medium') }, /response 200 application\/json\.kind: enum may now be "medium"/]
}

const additive: Record<string, Edit> = {
  'a new operation': (c) => { c.setIn(thingPath('delete'), { operationId: 'removeThing', responses: { 204: { description: 'Removed.' } } }) },
  'a new optional parameter': (c) => { c.addIn(parameters, { name: 'kind', in: 'query', schema: { type: 'string' } }) },
  'a new optional request field': (c) => { c.setIn(schema('NewThing', 'properties', 'colour'), { type: 'string' }) },
  'a new response field': (c) => { c.setIn(schema('Thing', 'properties', 'colour'), { type: 'string' }) },
  'a new status with its own code': (c) => { c.setIn(post('responses', '409'), { description: 'Taken.' }) },
  // A client handles every status the operation may still send (oasdiff: response-non-success-status-removed).
  'an error status no longer declared': (c) => { c.deleteIn(thingPath('get', 'responses', '404')) },
  'a request constraint widened': (c) => { c.setIn(schema('NewThing', 'properties', 'name', 'maxLength'), 300); c.setIn(limitParameter('schema', 'maximum'), 1000) },
  'a response limit narrowed': (c) => { c.setIn(schema('Thing', 'properties', 'name', 'maxLength'), 100); c.setIn(schema('Thing', 'properties', 'size', 'minimum'), 0) },
  'a serialization written out as its default': (c) => { c.setIn(limitParameter('style'), 'form'); c.setIn(limitParameter('explode'), true) },
  'an enum value added to a request': (c) => { c.addIn(schema('NewThing', 'properties', 'kind', 'enum'), 'medium') },
  'a required request field made optional': (c) => { c.setIn(schema('NewThing', 'required'), []) },
  'a new event payload field': (c) => { c.setIn(schema('Event', 'properties', 'time'), { type: 'string' }) },
  'a value added to a response enum that says it is open': (c) => {
    c.setIn(schema('Thing', 'properties', 'kind', 'x-extensible-enum'), true)
    c.addIn(schema('Thing', 'properties', 'kind', 'enum'), 'medium')
  },
  'a path parameter renamed with its template': (c) => {
    c.setIn(thingPath('parameters', 0, 'name'), 'id')
    c.setIn(['paths', '/things/{id}'], c.getIn(thingPath()))
    c.deleteIn(thingPath())
  }
}

t.test('each breaking change is named', async (t) => {
  for (const [name, [change, named]] of Object.entries(breaking)) {
    const changes = breakingChanges(base, changed(change))
    t.ok(changes.some((line) => named.test(line)), `${name}: ${JSON.stringify(changes)}`)
  }
})

t.test('an additive change passes', async (t) => {
  for (const [name, change] of Object.entries(additive)) t.same(breakingChanges(base, changed(change)), [], name)
  t.same(breakingChanges(base, base), [], 'no change at all')
})

t.test('the gate fails on a breaking change unless the major version went up', async (t) => {
  const narrow: Edit = (c) => { c.setIn(schema('NewThing', 'properties', 'name', 'maxLength'), 100) }
  const narrowed = changed(narrow)
  const refused = verdict(base, narrowed, 'base.yaml')
  t.equal(refused.status, 1)
  t.match(refused.lines, [/^1 breaking change against base\.yaml \(1\.2\.0 → 1\.2\.0\); make it additive/, /maxLength narrowed from 200 to 100/])
  t.equal(verdict(base, changed((c) => { c.setIn(['info', 'version'], '1.3.0'); narrow(c) }), 'base.yaml').status, 1, 'a minor version is not enough')
  const released = verdict(base, changed((c) => { c.setIn(['info', 'version'], '2.0.0'); narrow(c) }), 'base.yaml')
  t.equal(released.status, 0, 'a new major version may break')
  t.match(released.lines, [/allowed by the major version \(1\.2\.0 → 2\.0\.0\)/, /maxLength narrowed/])
})

/** Negative, zero or positive as semantic version `a` comes before, with or after `b` (major.minor.patch). */
const compareVersions = (a: string, b: string): number => {
  const [left, right] = [a, b].map((version) => version.split('.').map(Number))
  return (left ?? []).reduce((order, part, index) => order !== 0 ? order : part - (right?.[index] ?? 0), 0)
}
const lastRelease = readdirSync('contracts').filter((name) => /^\d+\.\d+\.\d+\.yaml$/.test(name))
  .sort((a, b) => compareVersions(a.replace(/\.yaml$/, ''), b.replace(/\.yaml$/, ''))).at(-1)

t.test('openapi.yaml breaks no client of the last released contract (npm run contract:breaking)', async (t) => {
  t.ok(lastRelease, 'a released contract is kept in contracts/')
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'scripts/contract-breaking.ts', `contracts/${String(lastRelease)}`])
  t.match(stdout, /breaks no client of contracts\//)
  const head = parse(readFileSync('openapi.yaml', 'utf8')) as Document
  const released = parse(readFileSync(`contracts/${String(lastRelease)}`, 'utf8')) as Document
  t.ok(compareVersions(head.info.version, released.info.version) >= 0, `openapi.yaml's version ${head.info.version} is not behind the last release's ${released.info.version}`)
})

t.test('the command speaks as a user expects: a usage line whose example exists, one line for a base it cannot read', async (t) => {
  const gate = async (...args: string[]): Promise<{ code: number, stderr: string }> =>
    await promisify(execFile)(process.execPath, ['--import', 'tsx', 'scripts/contract-breaking.ts', ...args])
      .then(() => ({ code: 0, stderr: '' }), (error: { code: number, stderr: string }) => error)
  const usage = await gate()
  t.equal(usage.code, 2)
  const example = /e\.g\. (contracts\/\S+\.yaml)/.exec(usage.stderr)?.[1]
  t.ok(example !== undefined && readdirSync('contracts').includes(example.replace('contracts/', '')), `its example is a released contract: ${usage.stderr}`)
  const unknown = await gate('no-such-ref')
  t.equal(unknown.code, 2)
  t.match(unknown.stderr, /^no-such-ref is neither a file nor a git ref whose openapi\.yaml can be read; usage: /)
  t.notMatch(unknown.stderr, /\n\s+at /, 'no stack trace')
})

t.test('an operation may go once it was deprecated and its sunset has passed, and not before (oasdiff\'s rule)', async (t) => {
  const deprecated = (sunset?: string): Document => changed((c) => {
    c.setIn(post('deprecated'), true)
    c.setIn(post('x-deprecated-at'), '2026-01-01')
    if (sunset !== undefined) c.setIn(post('x-sunset'), sunset)
  })
  const removed = (contract: Document): Document => {
    const copy = new YamlDocument(contract)
    copy.deleteIn(post())
    return copy.toJS() as Document
  }
  t.same(breakingChanges(deprecated('2026-06-30'), removed(deprecated('2026-06-30')), '2026-07-01'), [], 'after its sunset: not breaking')
  t.same(breakingChanges(deprecated('2026-06-30'), removed(deprecated('2026-06-30')), '2026-06-30'), ['POST /things (addThing): removed before its sunset (2026-06-30)'], 'on its sunset day: still breaking')
  t.same(breakingChanges(deprecated(), removed(deprecated()), '2030-01-01'), ['POST /things (addThing): removed with no sunset set'])
  t.same(breakingChanges(base, deprecated('2026-06-30')), [], 'deprecating an operation breaks no client')
})
