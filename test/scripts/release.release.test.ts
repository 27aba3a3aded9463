// npm run release (scripts/release.ts), run in a copy of this repository with an additive change committed: a patch
// release is refused, a minor one makes a coherent release (contract, packages, docs, changelog, contracts/, tag).
import { execFile } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { claimedVersionProblem, compareVersions, lastRelease, neededKind, nextVersion, releasedChangelog, unreleasedEntries, workingVersion } from '../../scripts/release.js'
import type { Document } from '../../scripts/contract-breaking.js'
import { contractChanges } from '../../scripts/contract-changes.js'
import { changedFixture, type Edit, fixture, limitParameter, parameters, post, schema } from '../support/contract-fixture.js'

// An addition, and a break, to the fixture.
const addColour: Edit = (c) => { c.setIn(schema('Thing', 'properties', 'colour'), { type: 'string' }) }
const narrowName: Edit = (c) => { c.setIn(schema('NewThing', 'properties', 'name', 'maxLength'), 1) }

const run = promisify(execFile)
const IDENTITY = { GIT_AUTHOR_NAME: 'Release Test', GIT_AUTHOR_EMAIL: 'release@example.com', GIT_COMMITTER_NAME: 'Release Test', GIT_COMMITTER_EMAIL: 'release@example.com' }
const SKIPPED = new Set(['node_modules', '.git', '.tap', 'dist', 'coverage', 'tmp', 'bench-results', 'test-artifacts'])

t.test('versions: compared, and the next of each kind', async (t) => {
  t.ok(compareVersions('1.10.0', '1.9.9') > 0)
  t.equal(compareVersions('1.2.3', '1.2.3'), 0)
  t.same(['major', 'minor', 'patch'].map((kind) => nextVersion('1.2.3', kind as 'major')), ['2.0.0', '1.3.0', '1.2.4'])
  t.ok(compareVersions('1.2.0-dev', '1.1.0') > 0 && compareVersions('1.2.0-dev', '1.2.0') < 0, 'a pre-release comes after the last release, before its own')
})

t.test('openapi.yaml never claims a released version it is not: the last release\'s while it is that contract, a pre-release of the next one once it is not', async (t) => {
  const last = lastRelease()!
  const released = parse(readFileSync(`contracts/${last}.yaml`, 'utf8')) as Document
  const head = parse(readFileSync('openapi.yaml', 'utf8')) as Document
  t.equal(head.info.version, workingVersion(last, released, head), `contracts/${last}.yaml and openapi.yaml (npm run release -- dev sets the version)`)
  const base = fixture()
  t.equal(workingVersion('1.1.0', base, changedFixture((c) => { c.setIn(['info', 'version'], '1.1.0') })), '1.1.0', 'the released contract')
  t.equal(workingVersion('1.1.0', base, changedFixture(addColour)), '1.2.0-dev', 'an addition')
  t.equal(workingVersion('1.1.0', base, changedFixture(narrowName)), '2.0.0-dev', 'a break')
  t.equal(workingVersion('1.1.0', base, changedFixture((c) => { c.setIn(['info', 'description'], 'Reworded.') })), '1.1.1-dev', 'prose')
})

t.test('npm run generate says when an edited contract still claims the released version', async (t) => {
  const base = fixture()
  const edited = (version: string): Document => changedFixture((c) => {
    c.setIn(['info', 'version'], version)
    c.setIn(schema('Thing', 'properties', 'sku'), { type: 'string' })
  })
  t.equal(claimedVersionProblem('1.1.0', base, edited('1.1.0')), 'openapi.yaml says 1.1.0, but it is 1.2.0-dev (it is not contracts/1.1.0.yaml): run npm run release -- dev')
  t.equal(claimedVersionProblem('1.1.0', base, edited('1.2.0-dev')), undefined, 'nothing once it says what it is')
})

t.test('the kind a change needs: breaking is major, anything a client sees minor, prose patch', async (t) => {
  const base = fixture()
  t.equal(neededKind(base, changedFixture(narrowName)), 'major')
  t.equal(neededKind(base, changedFixture(addColour)), 'minor')
  t.equal(neededKind(base, changedFixture((c) => { c.setIn(['info', 'description'], 'Reworded.'); c.setIn(['paths', '/things', 'get', 'summary'], 'Reworded.') })), 'patch')
})

t.test('the changelog\'s Unreleased section becomes the release, its heading linked to the contract it keeps', async (t) => {
  const released = releasedChangelog('# Changelog\n\n## [Unreleased]\n\n### Added\n- x\n\n[Unreleased]: openapi.yaml\n[1.1.0]: contracts/1.1.0.yaml\n', '1.2.0', '2026-11-27')
  t.equal(released, '# Changelog\n\n## [Unreleased]\n\n## [1.2.0] - 2026-11-27\n\n### Added\n- x\n\n[Unreleased]: openapi.yaml\n[1.2.0]: contracts/1.2.0.yaml\n[1.1.0]: contracts/1.1.0.yaml\n')
})

t.test('the contract\'s changes, as the release lists them: operations, responses, schemas, properties, enum values, deprecations, webhooks', async (t) => {
  const base = fixture()
  const head = changedFixture((c) => {
    addColour(c)
    c.setIn(schema('Fresh'), { type: 'object' })
    c.setIn(['paths', '/things', 'get', 'deprecated'], true)
    c.setIn(['paths', '/things', 'get', 'responses', '418'], { description: 'A teapot.' })
  })
  const changes = contractChanges(base, head)
  t.ok(changes.includes('Added optional property `Thing.colour`.'), 'a property')
  t.ok(changes.includes('Added schema `Fresh`.'), 'a schema')
  t.ok(changes.includes('Deprecated operation `GET /things` (`listThings`).'), 'a deprecation')
  t.ok(changes.includes('Added response 418 to `GET /things`.'), 'a status')
  t.same(contractChanges(head, base).filter((change) => change.startsWith('Removed')).sort(),
    ['Removed property `Thing.colour`.', 'Removed response 418 from `GET /things`.', 'Removed schema `Fresh`.'].sort(), 'and the other way, removals')
  t.same(contractChanges(base, base), [], 'none between a contract and itself')
})

t.test('every change a client can see is listed, one mutation at a time, and needs at least a minor release', async (t) => {
  const base = fixture()
  const cases: Array<[string, Edit, string]> = [
    ['a query parameter', (c) => { c.addIn(parameters, { name: 'colour', in: 'query', schema: { type: 'string' } }) }, 'Added optional query parameter `colour` to `GET /things`.'],
    ['a parameter made required', (c) => { c.setIn(limitParameter('required'), true) }, 'Made query parameter `limit` of `GET /things` required.'],
    ['a parameter\'s bound', (c) => { c.setIn(limitParameter('schema', 'maximum'), 50) }, 'Changed `maximum` of query parameter `limit` of `GET /things` from `100` to `50`.'],
    ['a response header', (c) => { c.setIn(post('responses', '201', 'headers', 'ETag'), { schema: { type: 'string' } }) }, 'Added response header `ETag` to 201 of `POST /things`.'],
    ['a property\'s maxLength', (c) => { c.setIn(schema('Thing', 'properties', 'name', 'maxLength'), 300) }, 'Changed `maxLength` of `Thing.name` from `200` to `300`.'],
    ['a property\'s type', (c) => { c.setIn(schema('Thing', 'properties', 'size', 'type'), 'number') }, 'Changed `type` of `Thing.size` from `"integer"` to `"number"`.'],
    ['a property made required', (c) => { c.addIn(schema('NewThing', 'required'), 'note') }, 'Made property `NewThing.note` required.'],
    ['a property named as a prose keyword', (c) => { c.setIn(schema('Thing', 'properties', 'description'), { type: 'string' }) }, 'Added optional property `Thing.description`.'],
    ['a property named summary', (c) => { c.setIn(schema('Thing', 'properties', 'summary'), { type: 'string' }) }, 'Added optional property `Thing.summary`.'],
    ['a request body made optional', (c) => { c.setIn(post('requestBody', 'required'), false) }, 'Changed `/paths/~1things/post/requestBody/required`.']
  ]
  for (const [what, change, line] of cases) {
    const head = changedFixture(change)
    t.same(contractChanges(base, head), [line], what)
    t.not(neededKind(base, head), 'patch', `${what}: not a patch`)
  }
  const reworded = changedFixture((c) => {
    c.setIn(schema('Thing', 'properties', 'name', 'description'), 'Reworded.')
    c.setIn(limitParameter('description'), 'Reworded.')
  })
  t.same(contractChanges(base, reworded), [], 'prose alone: nothing listed')
  t.equal(neededKind(base, reworded), 'patch', 'and a patch')
})

t.test('in a copy of the repository with an additive change: a patch release is refused, a minor one is coherent and tagged', async (t) => {
  // Outside the repository (t.testdir is inside it): a copy cannot go into a folder of what it copies.
  const copy = mkdtempSync(join(tmpdir(), 'items-service-release-'))
  t.teardown(() => { rmSync(copy, { recursive: true, force: true }) })
  cpSync('.', copy, { recursive: true, filter: (source) => !SKIPPED.has(source.split('/').at(-1) ?? '') || resolve(source) === resolve('.') })
  symlinkSync(resolve('node_modules'), join(copy, 'node_modules'))
  const git = async (...args: string[]): Promise<string> => (await run('git', args, { cwd: copy, env: { ...process.env, ...IDENTITY } })).stdout
  const release = async (kind: string): Promise<{ code: number, stdout: string, stderr: string }> =>
    await run(process.execPath, ['--import', 'tsx', 'scripts/release.ts', kind], { cwd: copy, env: { ...process.env, ...IDENTITY } })
      .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (error: { code: number, stdout: string, stderr: string }) => error)
  await git('init', '--quiet')
  await git('add', '--all')
  await git('commit', '--quiet', '--message', 'as it is')
  const previous = lastRelease(join(copy, 'contracts')) ?? ''
  // Additive: a new optional field of a create's body.
  const contract = join(copy, 'openapi.yaml')
  const text = readFileSync(contract, 'utf8')
  const anchor = '    CreateItemRequest:\n      type: object\n'
  t.ok(text.includes(anchor), 'the change applies')
  writeFileSync(contract, text.replace(/( {4}CreateItemRequest:\n[\s\S]*?\n {6}properties:\n)/, '$1        colour:\n          type: string\n          maxLength: 20\n'))
  await git('commit', '--quiet', '--all', '--message', 'an additive change')

  const patch = await release('patch')
  t.equal(patch.code, 1)
  t.match(patch.stderr, `release refused: openapi.yaml needs a minor release over ${previous}`)
  t.equal(await git('status', '--porcelain'), '', 'nothing was changed')

  const minor = await release('minor')
  const version = nextVersion(previous, 'minor')
  t.equal(minor.code, 0, minor.stderr)
  t.match(minor.stdout, `released ${version}`)
  const read = (file: string): string => readFileSync(join(copy, file), 'utf8')
  t.equal((parse(read('openapi.yaml')) as Document).info.version, version, 'the contract')
  t.equal(read(`contracts/${version}.yaml`), read('openapi.yaml'), 'kept in contracts/')
  const client = JSON.parse(read('clients/typescript/package.json')) as { version: string, description: string }
  t.equal(client.version, version, 'the client package')
  t.match(client.description, `openapi.yaml ${version}`)
  t.equal((JSON.parse(read('package.json')) as { version: string }).version, version, 'the server package')
  t.match(read('package-lock.json'), new RegExp(`^\\{\\n {2}"name": "@items-service/server",\\n {2}"version": "${version}",[\\s\\S]*?"": \\{\\n {6}"name": "@items-service/server",\\n {6}"version": "${version}"`))
  const released = read('CHANGELOG.md')
  t.match(released, new RegExp(`## \\[Unreleased\\]\\n\\n## \\[${version}\\] - \\d{4}-\\d{2}-\\d{2}\\n\\n### Contract\\n`), 'the changelog, the contract\'s changes first')
  const section = released.slice(released.indexOf(`## [${version}]`), released.indexOf('\n## [', released.indexOf(`## [${version}]`) + 1))
  t.match(section, '\n- Added optional property `CreateItemRequest.colour`.\n', 'the added property listed under the version, without a line written by hand')
  t.match(read('README.md'), `now ${version}`, 'the docs')
  t.notMatch(read('docs/clients.md'), `items-service-client-${previous}`)
  t.match(read('generated/openapi.ts'), 'colour', 'regenerated')
  t.equal(await git('status', '--porcelain'), '', 'all committed')
  t.equal((await git('tag', '--points-at', 'HEAD')).trim(), `v${version}`, 'and tagged')
  t.match(await git('log', '-1', '--format=%s'), `Release ${version}`)

  const again = await release('minor')
  t.equal(again.code, 1, 'a release right after a release')
  t.match(again.stderr, `release refused: nothing to release: openapi.yaml is contracts/${version}.yaml but for its version, and CHANGELOG.md's Unreleased section is empty`)
  t.equal((await git('tag', '--points-at', 'HEAD')).trim(), `v${version}`, 'nothing was released')
})

t.test('the changelog\'s Unreleased entries: what it says changed since the last release', async (t) => {
  t.equal(unreleasedEntries('# Changelog\n\n## [Unreleased]\n\n## [1.2.0] - 2026-11-27\n\n### Added\n- x\n'), '')
  t.equal(unreleasedEntries('# Changelog\n\n## [Unreleased]\n\n### Fixed\n- y\n\n## [1.2.0] - 2026-11-27\n'), '### Fixed\n- y')
  t.equal(unreleasedEntries('# Changelog\n\n## [Unreleased]\n\n[Unreleased]: https://h/r/compare/v1.2.0...HEAD\n'), '')
  t.equal(unreleasedEntries('# Changelog\n\n## [Unreleased]\n- z'), '- z')
})
