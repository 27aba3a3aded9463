import { type ChildProcess, fork } from 'node:child_process'
import { once } from 'node:events'
import { setPriority } from 'node:os'
import { extname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { OWASP_HASH_COST, type PasswordHashCost } from './hash-cost.js'

export type HashingRequest =
  | { id: number, operation: 'hash', password: string }
  | { id: number, operation: 'verify', hash: string | undefined, password: string }
export type HashingResponse = { id: number, value: string | boolean } | { id: number, error: string }

interface Pending {
  resolve: (value: string | boolean) => void
  reject: (error: Error) => void
}

// Niceness 10: where the event loop and a hash compete for one core, the event loop gets about 90 % of it.
const HASHING_NICENESS = 10
// The child is this module's sibling, as source under the test runner and `npm run dev`, as JavaScript once built.
const childModule = fileURLToPath(new URL(`./hashing-child${extname(import.meta.url)}`, import.meta.url))

/**
 * argon2 in a process of its own, at a lower CPU priority than the service. argon2 works on libuv's thread pool,
 * whose threads the kernel would otherwise schedule as equals of the event loop: on a busy core, a storm of
 * sign-ins took half the CPU time from every other request.
 *
 * The process starts on the first request and is started again after a crash; it never keeps the service alive
 * while idle, and it exits when the service does, or when `close` is called.
 */
export class HashingProcess {
  #connection: Connection | undefined
  #nextId = 0

  /** `cost` is what hashing a new password costs; a stored hash is checked at the cost it was made with. */
  constructor (readonly cost: PasswordHashCost = OWASP_HASH_COST) {}

  async hash (password: string): Promise<string> {
    const value = await this.#request({ id: this.#nextId++, operation: 'hash', password })
    return String(value)
  }

  /** True when `password` matches `hash`; with no hash (an unknown user) it takes as long and is false. */
  async verify (hash: string | undefined, password: string): Promise<boolean> {
    return await this.#request({ id: this.#nextId++, operation: 'verify', hash, password }) === true
  }

  /** Ends the process, failing whatever it was still asked (the app calls it once every request is answered). */
  async close (): Promise<void> {
    const child = this.#connection?.child
    // A disconnected child has exited, or is exiting by itself (hashing-child.ts).
    if (child?.connected !== true) return
    const exited = once(child, 'exit')
    // Unreferenced while idle: held again, so that the process waits for the child to be gone.
    child.ref()
    child.kill()
    await exited
  }

  async #request (request: HashingRequest): Promise<string | boolean> {
    const { child, pending } = this.#connection?.child.connected === true ? this.#connection : (this.#connection = start(this.cost))
    const answer = new Promise<string | boolean>((resolve, reject) => pending.set(request.id, { resolve, reject }))
    // Held while a request is out, so that even a process with nothing else to do waits for the answer.
    child.ref()
    child.channel?.ref()
    child.send(request)
    return await answer
  }
}

interface Connection {
  child: ChildProcess
  /** The requests this child has not answered yet, by id. */
  pending: Map<number, Pending>
}

function start (cost: PasswordHashCost): Connection {
  const child = fork(childModule, [JSON.stringify(cost)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const pending = new Map<number, Pending>()
  child.on('message', (response: HashingResponse) => {
    const request = pending.get(response.id)
    pending.delete(response.id)
    if (pending.size === 0) {
      child.unref()
      child.channel?.unref()
    }
    if ('error' in response) request?.reject(new Error(`password hashing failed: ${response.error}`))
    else request?.resolve(response.value)
  })
  // Whatever was asked of a lost process fails; the next request starts a new one.
  const fail = (error: Error): void => {
    for (const request of pending.values()) request.reject(error)
    pending.clear()
  }
  child.on('exit', (code, signal) => { fail(new Error(`the password hashing process exited (code ${code}, signal ${signal})`)) })
  // A failed spawn, or a message sent as the process died.
  child.on('error', fail)
  // Set at once, while the child is still starting Node: on Linux niceness belongs to each thread, and the
  // threads the child starts later (libuv's pool, where argon2 runs) inherit it from its main thread.
  // (pid is missing only when the spawn failed; setPriority then throws, and 'error' follows.)
  setPriority(child.pid!, HASHING_NICENESS)
  return { child, pending }
}
