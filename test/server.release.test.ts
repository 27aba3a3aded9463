// The README's first command as a fresh clone meets it: `npm start` builds what changed since its last build, then
// runs the built server as its own process, so stopping npm start stops the server; and so does the production start,
// `npm run start:prod`, which a supervisor signals by the pid it started.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { appendFile, cp, mkdtemp, readdir, rm, stat, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { testEnvironment } from './support/app.js'

t.test('npm start builds only what changed, and stopping its process (or npm run start:prod\'s) stops the server', async (t) => {
  const copy = await mkdtemp(join(tmpdir(), 'items-start-'))
  t.teardown(async () => { await rm(copy, { recursive: true, force: true }) })
  for (const entry of ['package.json', 'tsconfig.json', 'openapi.yaml', 'src', 'generated']) await cp(entry, join(copy, entry), { recursive: true })
  await symlink(join(process.cwd(), 'node_modules'), join(copy, 'node_modules'))
  const npmStart = async (command: readonly string[] = ['start']): Promise<{ child: ChildProcess, url: string, output: () => string }> => {
    const child = spawn('npm', command, { cwd: copy, env: { ...process.env, ...testEnvironment(), PORT: '0', LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] })
    t.teardown(() => { child.kill('SIGKILL') })
    let output = ''
    child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString()
        const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
        if (match?.[1] !== undefined) resolve(match[1])
      })
      child.once('exit', (code) => { reject(new Error(`npm ${command.join(' ')} exited with ${code}: ${output}`)) })
    })
    return { child, url, output: () => output }
  }
  const stopped = async ({ child, url }: { child: ChildProcess, url: string }): Promise<void> => {
    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    t.same(await exited, [0, null], 'npm exits 0 on SIGTERM')
    await t.rejects(fetch(`${url}/health/live`), 'and the server with it: the port is free')
  }
  const built = async (): Promise<Map<string, number>> => new Map(await Promise.all((await readdir(join(copy, 'dist'), { recursive: true })).map(async (file) => [file, (await stat(join(copy, 'dist', file))).mtimeMs] as const)))
  const first = await npmStart()
  t.match(first.output(), /^npm start: compiling into dist\/ what changed since the last build[^\n]*\n[\s\S]*Server listening/m, 'says what it does before it builds')
  t.equal((await fetch(`${first.url}/health/live`)).status, 200, 'serves')
  await stopped(first)
  const afterFirst = await built()
  await stopped(await npmStart())
  t.same(await built(), afterFirst, 'a start with nothing changed writes nothing')
  await appendFile(join(copy, 'src/handlers/health.ts'), '// changed\n')
  await stopped(await npmStart())
  const afterChange = await built()
  t.same([...afterChange].filter(([file, at]) => afterFirst.get(file) !== at && !file.endsWith('.tsbuildinfo')).map(([file]) => file).sort(),
    ['src/handlers/health.d.ts', 'src/handlers/health.js', 'src/handlers/health.js.map'].filter((file) => afterChange.has(file)), 'a start after one change writes that file\'s output alone')
  await stopped(await npmStart(['run', 'start:prod']))
})
