// The processes a benchmark measures: the built service and the baselines, each pinned to core 0 unless told
// otherwise, while autocannon runs on core 1.
import { type ChildProcess, spawn } from 'node:child_process'
import { freePort } from '../../harness/net.js'
import { serviceEnv } from './service.js'

const pin = (command: string[]): string[] => ['taskset', '-c', '0', ...command]

export interface Server { process: ChildProcess, url: string }

export async function start (command: string[], env: NodeJS.ProcessEnv): Promise<Server> {
  const [executable = '', ...args] = pin(command)
  const child = spawn(executable, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  const url = await new Promise<string>((resolve, reject) => {
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const match = /listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.once('exit', (code) => { reject(new Error(`${command.join(' ')} exited with ${code}`)) })
  })
  return { process: child, url }
}

export async function stop (server: Server): Promise<void> {
  const exited = new Promise((resolve) => server.process.once('exit', resolve))
  server.process.kill('SIGTERM')
  await exited
}

/**
 * Starts the built service (with `serviceEnv` unless told otherwise; `entry`, another checkout's build) and resolves
 * once it answers its readiness check.
 */
export async function startService (env: NodeJS.ProcessEnv = serviceEnv, pinned = true, entry = 'dist/src/server.js'): Promise<Server & { startupMs: number }> {
  const port = await freePort()
  const started = performance.now()
  const command = ['node', entry]
  const [executable = '', ...args] = pinned ? pin(command) : command
  const child = spawn(executable, args, { env: { ...process.env, ...env, PORT: String(port) }, stdio: ['ignore', 'ignore', 'inherit'] })
  const url = `http://127.0.0.1:${port}`
  while (!await fetch(`${url}/health/ready`).then((response) => response.ok, () => false)) {
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  return { process: child, url, startupMs: performance.now() - started }
}

/** A replica of the Redis at `url`, on a free port, keeping nothing on disk; resolves once it is in sync. */
export async function startReplica (url: string): Promise<{ stop: () => void }> {
  const { hostname, port: primaryPort } = new URL(url)
  const port = await freePort()
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--repl-diskless-load', 'swapdb', '--replicaof', hostname, primaryPort || '6379'], { stdio: 'ignore' })
  const { Redis } = await import('ioredis')
  const replica = new Redis(port, '127.0.0.1', { lazyConnect: true }).on('error', () => {})
  for (;;) {
    const info = await replica.info('replication').catch(() => '')
    if (info.includes('master_link_status:up')) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  replica.disconnect()
  return { stop: () => { child.kill('SIGKILL') } }
}
