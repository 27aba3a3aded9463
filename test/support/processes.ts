// The service as real processes: src/server.ts as the suite runs it (built into dist/suite/ by npm test), with the
// test's Node options (source maps) and coverage hooks.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { extname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { testEnvironment } from './app.js'

/** A module of the repository (`src/server`) as this suite has it: built beside the test that asks, or its source. */
export const repositoryModule = (path: string): string => fileURLToPath(new URL(`../../${path}${extname(import.meta.url)}`, import.meta.url))

const SERVER = repositoryModule('src/server')

export interface Server {
  process: ChildProcess
  url: string
  /** The operations API's address, when OPS_PORT was set (`0` lets the server pick a free port, which no other process can take first). */
  opsUrl: string | undefined
  output: () => string
}

export interface StartOptions {
  /** Node's own options (`--max-old-space-size=…`). */
  nodeOptions?: string[]
  /** What to run instead of the suite's src/server.ts: the package's build (`['dist/src/server.js']`). */
  entry?: string[]
  /** The directory to run it in; the repository by default. */
  cwd?: string
}

/** Starts the suite's src/server.ts (or `entry`) on a free port; resolves once it listens. */
export async function start (env: NodeJS.ProcessEnv, { nodeOptions = [], entry = [...process.execArgv, SERVER], cwd }: StartOptions = {}): Promise<Server> {
  const child = spawn(process.execPath, [...nodeOptions, ...entry], {
    env: { ...process.env, ...testEnvironment(), LOG_LEVEL: 'info', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd
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
  // The operations server listens before the public one: its line is in by now.
  const opsUrl = /Operations API at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1]
  return { process: child, url, opsUrl, output: () => output }
}

// Runs the suite's src/server.ts to its end, for starts that must fail; resolves with its exit code and standard error.
export async function failedStart (env: NodeJS.ProcessEnv): Promise<{ code: number | null, stderr: string }> {
  const child = spawn(process.execPath, [...process.execArgv, SERVER], {
    env: { ...process.env, ...testEnvironment(), ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [code] = await once(child, 'exit') as [number | null]
  return { code, stderr }
}
