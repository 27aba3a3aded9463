import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { newUser, testEnvironment } from './helper.js'

interface Server {
  process: ChildProcess
  url: string
  output: () => string
}

// Runs src/server.ts as a real process, with the same loader (and coverage hooks) as this test.
async function start (env: NodeJS.ProcessEnv): Promise<Server> {
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    env: { ...process.env, ...testEnvironment, LOG_LEVEL: 'info', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', () => {
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.once('exit', (code) => { reject(new Error(`server exited with ${code}: ${output}`)) })
  })
  return { process: child, url, output: () => output }
}

t.test('SIGTERM during load: every in-flight request completes, then the process exits 0', async (t) => {
  const server = await start({})
  const inFlight = Array.from({ length: 12 }, async () => await fetch(`${server.url}/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(newUser())
  }))
  await new Promise((resolve) => setTimeout(resolve, 15))
  const exited = once(server.process, 'exit')
  server.process.kill('SIGTERM')
  const responses = await Promise.all(inFlight)
  t.same(responses.map((response) => response.status), Array<number>(12).fill(201))
  const [code] = await exited
  t.equal(code, 0)
  t.match(server.output(), /"signal":"SIGTERM".*"msg":"shutting down"/)
})

t.test('a bad setting stops the start with one line naming the variable', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    env: { ...process.env, ...testEnvironment, PORT: 'eighty' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [code] = await once(child, 'exit')
  t.equal(code, 1)
  t.match(stderr, /^Invalid configuration: PORT must be an integer from 0 to 65535, got "eighty"$/m)
})
