// npm run release -- <major|minor|patch>: releases the working tree's openapi.yaml as the next version of that
// kind. It refuses a kind smaller than the change needs (breaking: major; anything a client can see: minor; prose
// only: patch), then sets the version everywhere it is said (openapi.yaml, the server's and the client's packages,
// the docs' "now X"), moves CHANGELOG.md's Unreleased section under the version and today's date, with the
// contract's changes since the last release listed first (contract-changes.ts), keeps the
// contract as contracts/<version>.yaml, regenerates, commits, and tags the commit v<version>.
//
// npm run release -- dev: between releases, sets the version openapi.yaml serves to what it is (`workingVersion`):
// the last release's while it is that contract, a pre-release of the next one (`1.2.0-dev`) once it is not, so
// that no served contract claims a released version it is not.
import { execFileSync } from 'node:child_process'
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parse } from 'yaml'
import { breakingChanges, type Document } from './contract-breaking.js'
import { contractChanges, withoutProse } from './contract-changes.js'

export const RELEASE_KINDS = ['patch', 'minor', 'major'] as const
export type ReleaseKind = typeof RELEASE_KINDS[number]
const isReleaseKind = (value: string | undefined): value is ReleaseKind => RELEASE_KINDS.some((kind) => kind === value)

// A released version, and one with a pre-release after it (SemVer's `-` part); as the docs say one, a single
// pre-release identifier, so that a file name's extension after it is not taken for part of it.
const RELEASED = /^(\d+)\.(\d+)\.(\d+)$/
const VERSION = /^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$/
const SAID_VERSION = '\\d+\\.\\d+\\.\\d+(?:-[0-9A-Za-z]+)?'
const partsOf = (version: string): [number, number, number, string] => {
  const [, major = 'NaN', minor = 'NaN', patch = 'NaN', preRelease = ''] = VERSION.exec(version) ?? []
  return [Number(major), Number(minor), Number(patch), preRelease]
}

/** Negative, zero or positive as version `a` comes before, with or after `b` (a pre-release before its release). */
export function compareVersions (a: string, b: string): number {
  const [left, right] = [partsOf(a), partsOf(b)]
  const order = left.slice(0, 3).reduce<number>((order, part, index) => order !== 0 ? order : Number(part) - Number(right[index]), 0)
  return order !== 0 || left[3] === right[3] ? order : left[3] === '' ? 1 : right[3] === '' ? -1 : left[3] < right[3] ? -1 : 1
}

/** The newest version kept in `contracts/`. */
export function lastRelease (directory = 'contracts'): string | undefined {
  return readdirSync(directory).map((name) => name.replace(/\.yaml$/, '')).filter((name) => RELEASED.test(name))
    .sort(compareVersions).at(-1)
}

export function nextVersion (version: string, kind: ReleaseKind): string {
  const [major, minor, patch] = partsOf(version)
  if (kind === 'major') return `${major + 1}.0.0`
  return kind === 'minor' ? `${major}.${minor + 1}.0` : `${major}.${minor}.${patch + 1}`
}

/** The smallest kind of release that the change from `base` to `head` needs. */
export function neededKind (base: Document, head: Document): ReleaseKind {
  if (breakingChanges(base, head).length > 0) return 'major'
  return JSON.stringify(withoutProse(base)) === JSON.stringify(withoutProse(head)) ? 'patch' : 'minor'
}

/** Where the docs say which version is current, each with what it reads at `version`. */
export const CURRENT_VERSION_SAID: ReadonlyArray<[RegExp, (version: string) => string]> = [
  [new RegExp(`\\bnow ${SAID_VERSION}`, 'g'), (version) => `now ${version}`],
  [new RegExp(`\\b${SAID_VERSION} now\\b`, 'g'), (version) => `${version} now`],
  [new RegExp(`items-service-(client|server)-${SAID_VERSION}`, 'g'), (version) => `items-service-$1-${version}`],
  [/a client of \d+\.x works against every \d+\.x service/g, (version) => `a client of ${partsOf(version)[0]}.x works against every ${partsOf(version)[0]}.x service`]
]
export const DOCS_SAYING_THE_VERSION = ['README.md', 'docs/clients.md', 'docs/contract.md'] as const

function rewrite (file: string, change: (text: string) => string): void {
  writeFileSync(file, change(readFileSync(file, 'utf8')))
}

const setPackageVersion = (file: string, version: string): void => {
  rewrite(file, (text) => text.replace(/^( {2}"version": )"[^"]+"/m, `$1"${version}"`).replace(/^( {6}"version": )"[^"]+"/m, `$1"${version}"`))
}

/**
 * The changelog with its Unreleased section released as `version` on `date`, its heading linked to the contract
 * the release keeps (a file of the repository, which every copy has, where a tag's page is on one host only), and
 * the contract's `changes` (contract-changes.ts) listed under it, before the maintainers' own lines.
 */
export function releasedChangelog (text: string, version: string, date: string, changes: readonly string[] = []): string {
  if (!text.includes('## [Unreleased]\n')) throw new Error('CHANGELOG.md has no "## [Unreleased]" section')
  const listed = changes.length === 0 ? '' : `\n### Contract\n${changes.map((change) => `- ${change}`).join('\n')}\n`
  return text
    .replace('## [Unreleased]\n', `## [Unreleased]\n\n## [${version}] - ${date}\n${listed}`)
    .replace(/^\[Unreleased\]: openapi\.yaml$/m, `[Unreleased]: openapi.yaml\n[${version}]: contracts/${version}.yaml`)
}

/** The entries of the changelog's Unreleased section: empty when nothing is said to have changed since the last release. */
export function unreleasedEntries (text: string): string {
  const [, section = ''] = /^## \[Unreleased\]\n([\s\S]*?)(?=^## \[|^\[Unreleased\]:|(?![\s\S]))/m.exec(text) ?? []
  return section.trim()
}

/** Whether two contracts are the same but for the version each says it is. */
const sameButVersion = (base: Document, head: Document): boolean =>
  JSON.stringify({ ...base, info: { ...base.info, version: '' } }) === JSON.stringify({ ...head, info: { ...head.info, version: '' } })

/**
 * The version `head` is, `base` being the contract released as `last`: `last` while it is that contract, a
 * pre-release of the next version its change needs once it is not (a client pinning a released version never
 * gets another contract under that name).
 */
export function workingVersion (last: string, base: Document, head: Document): string {
  return sameButVersion(base, head) ? last : `${nextVersion(last, neededKind(base, head))}-dev`
}

/**
 * What `npm run generate` says when `head` claims a version it is not (an edited contract still saying the released
 * version, say): undefined while it says what it is.
 */
export function claimedVersionProblem (last: string, base: Document, head: Document): string | undefined {
  const working = workingVersion(last, base, head)
  if (head.info.version === working) return undefined
  return `openapi.yaml says ${head.info.version}, but it is ${working} (it is not contracts/${last}.yaml): run npm run release -- dev`
}

/** The working tree's contract, and the last release's, when contracts/ keeps one. */
export function releasedAndWorking (): { last: string, base: Document, head: Document } | undefined {
  const last = lastRelease()
  if (last === undefined) return undefined
  return { last, base: parse(readFileSync(`contracts/${last}.yaml`, 'utf8')) as Document, head: parse(readFileSync('openapi.yaml', 'utf8')) as Document }
}

/** Sets `version` everywhere it is said: the contract, both packages, the docs' current version. */
function setVersion (version: string): void {
  rewrite('openapi.yaml', (text) => text.replace(/^( {2}version: ).+$/m, `$1${version}`))
  setPackageVersion('package.json', version)
  setPackageVersion('package-lock.json', version)
  setPackageVersion('clients/typescript/package.json', version)
  rewrite('clients/typescript/package.json', (text) => text.replace(new RegExp(`openapi\\.yaml ${SAID_VERSION}`), `openapi.yaml ${version}`))
  for (const file of DOCS_SAYING_THE_VERSION) {
    rewrite(file, (text) => CURRENT_VERSION_SAID.reduce((said, [pattern, replacement]) => said.replace(pattern, replacement(version)), text))
  }
}

/** The last release, and it and the working tree's contract. */
function contracts (): { previous: string, base: Document, head: Document } {
  const contracts = releasedAndWorking()
  if (contracts === undefined) throw new ReleaseRefused('contracts/ keeps no released contract to compare with')
  return { previous: contracts.last, base: contracts.base, head: contracts.head }
}

function git (...args: string[]): string {
  return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
}

function release (kind: ReleaseKind): string {
  if (git('status', '--porcelain') !== '') throw new ReleaseRefused('the working tree has changes: commit them (the release is a commit of its own)')
  const { previous, base, head } = contracts()
  if (sameButVersion(base, head) && unreleasedEntries(readFileSync('CHANGELOG.md', 'utf8')) === '') {
    throw new ReleaseRefused(`nothing to release: openapi.yaml is contracts/${previous}.yaml but for its version, and CHANGELOG.md's Unreleased section is empty`)
  }
  const needed = neededKind(base, head)
  if (RELEASE_KINDS.indexOf(kind) < RELEASE_KINDS.indexOf(needed)) {
    throw new ReleaseRefused(`openapi.yaml needs a ${needed} release over ${previous} (npm run contract:breaking -- contracts/${previous}.yaml), not a ${kind} one`)
  }
  const version = nextVersion(previous, kind)
  setVersion(version)
  rewrite('CHANGELOG.md', (text) => releasedChangelog(text, version, new Date().toISOString().slice(0, 10), contractChanges(base, head)))
  copyFileSync('openapi.yaml', `contracts/${version}.yaml`)
  execFileSync(process.execPath, ['--import', 'tsx', 'scripts/generate.ts'], { stdio: 'ignore' })
  git('add', '--all')
  git('commit', '--quiet', '--message', `Release ${version}`)
  git('tag', `v${version}`)
  return version
}

/** A release that must not be made as asked; the message says why. */
export class ReleaseRefused extends Error {
  override name = 'ReleaseRefused'
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const kind = process.argv[2]
  if (kind === 'dev') {
    const { previous, base, head } = contracts()
    const version = workingVersion(previous, base, head)
    setVersion(version)
    execFileSync(process.execPath, ['--import', 'tsx', 'scripts/generate.ts'], { stdio: 'ignore' })
    console.log(`openapi.yaml is ${version} until the next release`)
    process.exit(0)
  }
  if (!isReleaseKind(kind)) {
    console.error('usage: npm run release -- <major|minor|patch|dev>')
    process.exit(2)
  }
  try {
    const version = release(kind)
    console.log(`released ${version}: committed and tagged v${version}; push the commit and the tag`)
  } catch (error) {
    if (!(error instanceof ReleaseRefused)) throw error
    console.error(`release refused: ${error.message}`)
    process.exit(1)
  }
}
