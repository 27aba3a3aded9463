// The production start as the Dockerfile makes it (no container engine runs here): its build stage's steps, run
// as written on a clean copy of the repository, leave a tree without dev tools that serves from dist/.
import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { environmentSchema } from '../src/environment.js'
import { start } from './processes.js'

const run = promisify(execFile)
const npmEnvironment = { ...process.env, NO_UPDATE_NOTIFIER: '1' }

interface Instruction {
  readonly keyword: string
  readonly argument: string
}

interface Stage {
  readonly from: string
  readonly instructions: readonly Instruction[]
}

/** The Dockerfile's stages, each with its instructions (continued lines joined, comments left out). */
function stagesOf (dockerfile: string): Stage[] {
  const lines = dockerfile.replace(/\\\n\s*/g, '').split('\n').filter((line) => line.trim() !== '' && !line.startsWith('#'))
  const stages: Array<{ from: string, instructions: Instruction[] }> = []
  for (const line of lines) {
    const [, keyword = '', argument = ''] = /^(\w+)\s+(.*)$/.exec(line.trim()) ?? []
    if (keyword === 'FROM') stages.push({ from: argument, instructions: [] })
    else stages.at(-1)?.instructions.push({ keyword, argument })
  }
  return stages
}

/** The variables an ENV instruction sets (`ENV A=1 B=2`). */
const environmentOf = (instructions: readonly Instruction[]): Record<string, string> => Object.fromEntries(instructions
  .filter((instruction) => instruction.keyword === 'ENV')
  .flatMap((instruction) => instruction.argument.split(/\s+/).map((pair) => pair.split('=') as [string, string])))

const dockerfile = stagesOf(await readFile('Dockerfile', 'utf8'))

t.test('the Dockerfile builds in one stage and runs, unprivileged, from another that holds no dev tools', async (t) => {
  t.equal(dockerfile.length, 2)
  const [build, runtime] = dockerfile
  t.match(build?.from, /^node:(22|24)[\w.-]* AS build$/, 'the build stage, on an LTS line CI proves')
  const runtimeSteps = runtime?.instructions ?? []
  t.notOk(runtimeSteps.some((instruction) => instruction.keyword === 'RUN'), 'nothing runs in the runtime stage: it only copies the build\'s result')
  t.same(runtimeSteps.filter((instruction) => instruction.keyword === 'USER').map((instruction) => instruction.argument), ['node'], 'not root')
  t.match(environmentOf(runtimeSteps), { HOST: '0.0.0.0', NODE_ENV: 'production' })
  t.match(runtimeSteps.find((instruction) => instruction.keyword === 'HEALTHCHECK')?.argument, /\/health\/ready/)
})

t.test('the build stage\'s steps, on a clean copy, leave a tree that serves from dist/ without dev tools', async (t) => {
  const copy = await mkdtemp(join(tmpdir(), 'items-image-'))
  t.teardown(async () => { await rm(copy, { recursive: true, force: true }) })
  // COPY . . with the .dockerignore's entries left out.
  const ignored = new Set((await readFile('.dockerignore', 'utf8')).split('\n').filter((line) => line !== ''))
  await cp('.', copy, { recursive: true, filter: (source) => !ignored.has(basename(source)) })
  for (const step of dockerfile[0]?.instructions.filter((instruction) => instruction.keyword === 'RUN') ?? []) {
    await run('sh', ['-c', step.argument], { cwd: copy, env: npmEnvironment })
  }
  await t.rejects(run('npx', ['--no-install', 'tsc', '--version'], { cwd: copy, env: npmEnvironment }), 'the dev tools are gone')

  const runtime = dockerfile[1]?.instructions ?? []
  const cmd = JSON.parse(runtime.find((instruction) => instruction.keyword === 'CMD')?.argument ?? '[]') as string[]
  t.equal(cmd[0], 'node')
  const server = await start({ ...environmentOf(runtime), PORT: '0', STORE: 'memory', CONTRACT_STRICT_RESPONSES: '0', PASSWORD_HASH_MEMORY_KIB: undefined, PASSWORD_HASH_PASSES: undefined }, { entry: cmd.slice(1), cwd: copy })
  t.teardown(() => { server.process.kill() })
  t.equal((await fetch(`${server.url}/docs/json`)).status, 200, 'the contract it serves is in the image')
  const healthcheck = JSON.parse(runtime.find((instruction) => instruction.keyword === 'HEALTHCHECK')?.argument.replace(/^.*?CMD /, '') ?? '[]') as string[]
  const { port } = new URL(server.url)
  await run(healthcheck[0] ?? '', healthcheck.slice(1), { env: { ...process.env, PORT: port } })
  t.pass('the HEALTHCHECK command passes against it')
})

t.test('compose.yaml runs three instances on Redis, named only by variables the service reads, and Prometheus scrapes them', async (t) => {
  type Service = { environment?: Record<string, string> }
  const compose = parse(await readFile('compose.yaml', 'utf8'), { merge: true }) as { services: Record<string, Service> }
  const known = new Set(Object.keys(environmentSchema.properties))
  const instances = Object.entries(compose.services).filter(([name]) => name.startsWith('items-'))
  t.equal(instances.length, 3, 'three instances')
  for (const [name, service] of instances) {
    t.same(Object.keys(service.environment ?? {}).filter((variable) => !known.has(variable)), [], `${name} names no unknown variable`)
    t.match(service.environment, { STORE: 'redis', NODE_ENV: 'production' }, `${name} shares the catalogue on Redis`)
  }
  t.ok(compose.services.redis, 'with Redis')
  const prometheus = parse(await readFile('ops/prometheus.yml', 'utf8')) as { scrape_configs: Array<{ static_configs: Array<{ targets: string[] }> }> }
  const targets = prometheus.scrape_configs.flatMap((scrape) => scrape.static_configs.flatMap((config) => config.targets))
  t.same(targets, instances.map(([name, service]) => `${name}:${service.environment?.OPS_PORT}`), 'Prometheus scrapes each instance\'s OPS_PORT')
  t.ok(compose.services.prometheus, 'and Prometheus')
})
