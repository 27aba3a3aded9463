// Ports for the services and peers a test or a benchmark starts.
import { linkSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

// Below Linux's ephemeral range (ip_local_port_range, 32768 and up by default): the kernel hands those to every
// outgoing connection and to listen(0), so a port found free there may be a client socket's by the time the process
// told of it listens. Ports here are taken only by a listen that names them.
const LOWEST = 20_000
const RANGE = 12_768

// A port found free is free for every process until the one told of it listens (or listens again, after a restart),
// and tap runs test files side by side, as a machine may run suites: so each port handed out is also held, by a file
// naming the process, until that process ends. A file whose process is gone (killed) is taken over.
const HELD = join(tmpdir(), 'items-service-ports')
const held: string[] = []

function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

function code (error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException).code
}

/** True when this process now holds `port`, which no other living process holds nor it held already. */
export function holdPort (port: number): boolean {
  mkdirSync(HELD, { recursive: true })
  const file = join(HELD, String(port))
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' })
  } catch (error) {
    if (code(error) !== 'EEXIST') throw error
    // Moved aside before it is read, so that of two processes taking over one file only one does.
    const aside = `${file}.${process.pid}`
    try {
      renameSync(file, aside)
    } catch (error) {
      if (code(error) === 'ENOENT') return false
      throw error
    }
    const holder = Number(readFileSync(aside, 'utf8'))
    if (holder === process.pid || alive(holder)) {
      // Held after all (by this process, or by another that took it over meanwhile): its file goes back, unless a
      // third process took the port in between, which then holds it.
      try {
        linkSync(aside, file)
      } catch (error) {
        if (code(error) !== 'EEXIST') throw error
      }
      unlinkSync(aside)
      return false
    }
    unlinkSync(aside)
    return holdPort(port)
  }
  held.push(file)
  return true
}

process.once('exit', () => {
  for (const file of held) {
    try {
      unlinkSync(file)
    } catch {
      // Taken over as if this process had been killed: another holds it now.
    }
  }
})

/** A port no one listens on now nor was handed to another living process, for a process that must be told its port before it starts. */
export async function freePort (host = '127.0.0.1'): Promise<number> {
  for (;;) {
    const port = LOWEST + Math.floor(Math.random() * RANGE)
    if (!holdPort(port)) continue
    const server = createServer()
    const listening = await new Promise<boolean>((resolve) => {
      server.once('error', () => { resolve(false) })
      server.listen(port, host, () => { resolve(true) })
    })
    if (listening) {
      await new Promise((resolve) => server.close(resolve))
      return port
    }
  }
}
