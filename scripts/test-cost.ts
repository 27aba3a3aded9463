// npm run test:cost: what a run of `npm test` costs in CPU-seconds (user + system, the run's every process), the type
// check and lint apart from the test files, and the ten costliest files, each with the children it waited for.
// Machines of one kind differ in speed by half: compare two builds by runs on one machine, in one session.
// TEST_COST_ARGS: the tap arguments, instead of the package's configuration (e.g. a few files).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

const RECORDER = resolve(import.meta.dirname, 'test-cost/recorder.mjs')
const TICKS_PER_SECOND = 100

/** CPU-seconds this process's children took, those it has waited for, from /proc (Linux). */
async function childrenSeconds (): Promise<number> {
  const stat = await readFile('/proc/self/stat', 'utf8')
  const [cutime = 0, cstime = 0] = stat.slice(stat.lastIndexOf(') ') + 2).split(' ').slice(13, 15).map(Number)
  return (cutime + cstime) / TICKS_PER_SECOND
}

async function measured (command: string, args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<{ seconds: number, code: number | null }> {
  const before = await childrenSeconds()
  const child = spawn(command, args, { stdio: 'inherit', env: { ...process.env, ...env } })
  const [code] = await once(child, 'exit') as [number | null]
  return { seconds: await childrenSeconds() - before, code }
}

const scratch = await mkdtemp(join(tmpdir(), 'test-cost-'))
const costs = join(scratch, 'costs.jsonl')
try {
  const started = performance.now()
  const check = await measured('npm', ['run', 'check'])
  const tapArgs = process.env.TEST_COST_ARGS?.split(' ').filter((arg) => arg !== '') ?? []
  const tests = await measured('npx', ['tap', ...tapArgs], {
    CONTRACT_COVERAGE: 'check',
    TEST_COST_FILE: costs,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${RECORDER}`.trim()
  })
  const files = (await readFile(costs, 'utf8').catch(() => '')).split('\n').filter((line) => line !== '')
    .map((line) => JSON.parse(line) as { file: string, cpuSeconds: number })
    // Named by their sources: tap runs them built (dist/suite/).
    .map(({ file, cpuSeconds }) => ({ file: file.replace(/^dist\/suite\//, '').replace(/\.js$/, '.ts'), cpuSeconds }))
    .sort((a, b) => b.cpuSeconds - a.cpuSeconds)
  const round = (seconds: number): string => seconds.toFixed(1)
  console.log(`\nnpm test: ${round(check.seconds + tests.seconds)} CPU-s in ${round((performance.now() - started) / 1000)} s (check ${round(check.seconds)}, tap ${round(tests.seconds)}, of which ${files.length} test files ${round(files.reduce((sum, { cpuSeconds }) => sum + cpuSeconds, 0))})`)
  console.log('the ten costliest files, CPU-s:')
  for (const { file, cpuSeconds } of files.slice(0, 10)) console.log(`  ${round(cpuSeconds).padStart(6)}  ${file}`)
  process.exitCode = check.code === 0 && tests.code === 0 ? 0 : 1
} finally {
  await rm(scratch, { recursive: true, force: true })
}
