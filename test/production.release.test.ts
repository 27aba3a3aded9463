// What leaves the repository: the npm package another project installs, and the image the Dockerfile makes (no
// container engine runs here, so its stages are followed on the file system). Both hold the build of one `npm pack`.
import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { environmentSchema } from '../src/config/environment.js'
import { start } from './support/processes.js'

const run = promisify(execFile)
// npm takes what its cache holds without asking the registry again (the Dockerfile's steps run as written).
const npmEnvironment = { ...process.env, NO_UPDATE_NOTIFIER: '1', npm_config_prefer_offline: 'true' }

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

const argumentsOf = (instructions: readonly Instruction[], keyword: string): string[] =>
  instructions.filter((instruction) => instruction.keyword === keyword).map((instruction) => instruction.argument)

/** The variables an ENV instruction sets (`ENV A=1 B=2`). */
const environmentOf = (instructions: readonly Instruction[]): Record<string, string> => Object.fromEntries(
  argumentsOf(instructions, 'ENV').flatMap((argument) => argument.split(/\s+/).map((pair) => pair.split('=') as [string, string])))

const [dependencies, build, runtime] = stagesOf(await readFile('Dockerfile', 'utf8'))

// The dependencies stage, as written, on a directory holding what it copies: begun now, beside the build below,
// which it does not need.
async function dependenciesStage (): Promise<string> {
  const installed = await mkdtemp(join(tmpdir(), 'items-dependencies-'))
  t.teardown(async () => { await rm(installed, { recursive: true, force: true }) })
  for (const file of argumentsOf(dependencies?.instructions ?? [], 'COPY')[0]?.split(/\s+/).slice(0, -1) ?? []) await cp(file, join(installed, file))
  for (const step of argumentsOf(dependencies?.instructions ?? [], 'RUN')) await run('sh', ['-c', step], { cwd: installed, env: npmEnvironment })
  return installed
}
const dependenciesInstalled = dependenciesStage()
// Its failure is reported by the test that awaits it, not as an unhandled rejection before then.
dependenciesInstalled.catch(() => {})

// One build for both: `npm pack` runs the package's `prepack` script, `npm run build`, in this checkout.
const packDirectory = await mkdtemp(join(tmpdir(), 'items-pack-'))
t.teardown(async () => { await rm(packDirectory, { recursive: true, force: true }) })
const { stdout: packed } = await run('npm', ['pack', '--silent', '--pack-destination', packDirectory], { env: npmEnvironment })
const tarball = join(packDirectory, packed.trim().split('\n').at(-1) ?? '')

// Another project that installs the package, begun now: its install and the dependencies stage's take most of this
// file's time, and run at once.
async function installIntoAnotherProject (): Promise<string> {
  const project = await mkdtemp(join(tmpdir(), 'items-embed-'))
  t.teardown(async () => { await rm(project, { recursive: true, force: true }) })
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'embedder', private: true, type: 'module' }))
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], { cwd: project, env: npmEnvironment })
  return project
}
const embedder = installIntoAnotherProject()
// Its failure is reported by the test that awaits it, not as an unhandled rejection before then.
embedder.catch(() => {})

t.test('the Dockerfile installs the production dependencies in one stage, builds in another, and runs, unprivileged, from a third', async (t) => {
  t.match(dependencies?.from, /^node:(22|24)[\w.-]* AS dependencies$/, 'on an LTS line CI proves')
  t.same(argumentsOf(dependencies?.instructions ?? [], 'COPY'), ['package.json package-lock.json ./'], 'from the manifest and the lock alone')
  t.match(build?.from, /^node:(22|24)[\w.-]* AS build$/)
  // This checkout was installed so (`npm ci`), and `npm pack` above ran the build: the test follows the build
  // stage by using this checkout's build.
  t.same(argumentsOf(build?.instructions ?? [], 'RUN'), ['npm ci --no-audit --no-fund', 'npm run build'], 'the repository\'s install and build')
  // Dependencies first, then the sources: an edit to the sources reuses the installed layer.
  t.same(build?.instructions.filter(({ keyword }) => keyword === 'COPY' || keyword === 'RUN').map(({ keyword, argument }) => `${keyword} ${argument}`), [
    'COPY package.json package-lock.json ./', 'RUN npm ci --no-audit --no-fund', 'COPY . .', 'RUN npm run build'
  ], 'the build stage installs from the manifest and the lock before it copies the sources')
  const runtimeSteps = runtime?.instructions ?? []
  t.same(argumentsOf(runtimeSteps, 'RUN'), [], 'nothing runs in the runtime stage: it only copies the other stages\' results')
  t.same(argumentsOf(runtimeSteps, 'USER'), ['node'], 'not root')
  t.match(environmentOf(runtimeSteps), { HOST: '0.0.0.0', NODE_ENV: 'production' })
  t.match(argumentsOf(runtimeSteps, 'HEALTHCHECK')[0], /\/health\/ready/)
})

t.test('no local environment file reaches an image: .dockerignore leaves out .env and its variants', async (t) => {
  const ignored = (await readFile('.dockerignore', 'utf8')).split('\n').map((line) => line.trim())
  t.ok(ignored.includes('.env'), '.env')
  t.ok(ignored.includes('.env.*'), '.env.local, .env.production, ...')
})

t.test('the runtime tree, assembled as the Dockerfile says, serves from dist/ without dev tools, and its HEALTHCHECK passes', async (t) => {
  const stageDirectories: Record<string, string> = { build: '.' }
  const image = await mkdtemp(join(tmpdir(), 'items-image-'))
  t.teardown(async () => { await rm(image, { recursive: true, force: true }) })
  stageDirectories.dependencies = await dependenciesInstalled
  // `COPY --from=<stage> /app/<source>… <destination>`, from the directory that stands for each stage's /app.
  const runtimeSteps = runtime?.instructions ?? []
  for (const copy of argumentsOf(runtimeSteps, 'COPY')) {
    const [from = '', ...paths] = copy.split(/\s+/)
    const stage = stageDirectories[from.replace('--from=', '')] ?? ''
    const destination = paths.pop() ?? ''
    for (const source of paths) {
      const relative = source.replace(/^\/app\//, '')
      // cp(1): node:fs's cp takes several times as long over node_modules.
      await run('cp', ['-R', join(stage, relative), destination.endsWith('/') ? join(image, destination, relative) : join(image, destination)])
    }
  }
  await t.rejects(run('npx', ['--no-install', 'tsc', '--version'], { cwd: image, env: npmEnvironment }), 'the dev tools are not there')

  const cmd = JSON.parse(argumentsOf(runtimeSteps, 'CMD')[0] ?? '[]') as string[]
  t.equal(cmd[0], 'node')
  const server = await start({ ...environmentOf(runtimeSteps), PORT: '0', STORE: 'memory', CONTRACT_STRICT_RESPONSES: '0', PASSWORD_HASH_MEMORY_KIB: undefined, PASSWORD_HASH_PASSES: undefined }, { entry: cmd.slice(1), cwd: image })
  t.teardown(() => { server.process.kill() })
  t.equal((await fetch(`${server.url}/docs/json`)).status, 200, 'the contract it serves is in the image')
  const healthcheck = JSON.parse(argumentsOf(runtimeSteps, 'HEALTHCHECK')[0]?.replace(/^.*?CMD /, '') ?? '[]') as string[]
  const { port } = new URL(server.url)
  await run(healthcheck[0] ?? '', healthcheck.slice(1), { env: { ...process.env, PORT: port } })
  t.pass('the HEALTHCHECK command passes against it')
})

t.test('the packed package installs into another project and serves from there', async (t) => {
  const project = await embedder
  await writeFile(join(project, 'check.js'), `import { buildApp } from '@items-service/server'
const app = await buildApp({ logLevel: 'silent' })
const response = await app.inject({ method: 'GET', url: '/health/ready' })
console.log(response.statusCode, response.body)
await app.close()
`)
  const check = await run(process.execPath, ['check.js'], { cwd: project })
  t.equal(check.stdout.trim(), '200 {"status":"ok"}')
})

t.test('compose.yaml runs three instances on Redis, named only by variables the service reads, and Prometheus scrapes them', async (t) => {
  type Service = { environment?: Record<string, string>, stop_grace_period?: string }
  const compose = parse(await readFile('compose.yaml', 'utf8'), { merge: true }) as { services: Record<string, Service> }
  const known = new Set(Object.keys(environmentSchema.properties))
  const instances = Object.entries(compose.services).filter(([name]) => name.startsWith('items-'))
  t.equal(instances.length, 3, 'three instances')
  for (const [name, service] of instances) {
    t.same(Object.keys(service.environment ?? {}).filter((variable) => !known.has(variable)), [], `${name} names no unknown variable`)
    t.match(service.environment, { STORE: 'redis', NODE_ENV: 'production' }, `${name} shares the catalogue on Redis`)
    t.match(service.environment, { OPS_HOST: '0.0.0.0', OPS_TOKEN: /^\$\{OPS_TOKEN:\?/ }, `${name}'s operations port, open to the network, takes a token from the environment`)
    const graceSeconds = Number(/^(\d+)s$/.exec(service.stop_grace_period ?? '')?.[1] ?? 10)
    t.ok(graceSeconds * 1000 > Number(service.environment?.SHUTDOWN_TIMEOUT_MS), `${name} is given longer to stop (${graceSeconds} s) than its SHUTDOWN_TIMEOUT_MS, so it drains before it is killed`)
  }
  t.ok(compose.services.redis, 'with Redis')
  const servers = Object.entries(compose.services as Record<string, { command?: string[] }>).filter(([name]) => /^redis(-replica-\d)?$/.test(name))
  for (const [name, { command = [] }] of servers) {
    const setting = (option: string): string | undefined => command[command.indexOf(option) + 1]
    t.match(setting('--maxmemory'), /^\$\{REDIS_MAXMEMORY:-\d+gb\}$/, `${name} is sized: every bound of the store derives from it`)
    t.equal(setting('--maxmemory-policy'), 'noeviction', `${name} evicts nothing`)
    t.match([setting('--min-replicas-to-write'), setting('--min-replicas-max-lag')], [/^\$\{REDIS_MIN_REPLICAS_TO_WRITE:-0\}$/, '10'],
      `${name} takes docs/redis.md's settings for replicas when they are asked for`)
  }
  t.equal(servers.length, 3, 'the primary and its two replicas')
  const highAvailability = Object.entries(compose.services as Record<string, Service & { profiles?: string[], command?: string | string[] }>)
    .filter(([, service]) => service.profiles?.includes('ha'))
  t.same(highAvailability.map(([name]) => name), ['redis-replica-1', 'redis-replica-2', 'sentinel-1', 'sentinel-2', 'sentinel-3'], 'and, in the ha profile, two replicas and three sentinels')
  t.match(highAvailability.map(([, service]) => String(service.command)), [/--replicaof,redis,6379/, /--replicaof,redis,6379/, /sentinel monitor mymaster redis 6379 2/, /sentinel monitor mymaster redis 6379 2/, /sentinel monitor mymaster redis 6379 2/],
    'the replicas replicate redis, which the sentinels monitor under the default REDIS_SENTINEL_NAME')
  for (const [name, service] of instances) t.match(service.environment?.REDIS_SENTINELS, /^\$\{REDIS_SENTINELS:-\}$/, `${name} follows the sentinels when they are given`)
  const prometheus = parse(await readFile('ops/prometheus.yml', 'utf8')) as { scrape_configs: Array<{ static_configs: Array<{ targets: string[] }>, authorization?: { credentials_file?: string } }> }
  t.same(prometheus.scrape_configs.map((scrape) => scrape.authorization?.credentials_file), ['/run/secrets/ops-token'], 'Prometheus sends the token')
  const targets = prometheus.scrape_configs.flatMap((scrape) => scrape.static_configs.flatMap((config) => config.targets))
  t.same(targets, instances.map(([name, service]) => `${name}:${service.environment?.OPS_PORT}`), 'Prometheus scrapes each instance\'s OPS_PORT')
  t.ok(compose.services.prometheus, 'and Prometheus')
})
