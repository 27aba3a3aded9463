// Waiting for what a test needs, never for a time a busy machine may not keep.
import type { FastifyInstance } from 'fastify'

/** Resolves once `holds()` does, looking again every `everyMs`: tap's timeout bounds the wait, not a guess at the machine's speed. */
export async function until (holds: () => boolean, everyMs = 10): Promise<void> {
  while (!holds()) await new Promise((resolve) => setTimeout(resolve, everyMs))
}

/**
 * Runs `work` while the app measures its event loop's delay past `maxEventLoopDelayMs`: every turn of the loop takes
 * 50 ms until the app has measured it, and on until `work` settles, so that no sample taken meanwhile (one each
 * 250 ms, sooner on a busy machine than `work` may end) reads a calm loop.
 */
export async function whileEventLoopOverloaded<T> (app: FastifyInstance, maxEventLoopDelayMs: number, work: () => Promise<T>): Promise<T> {
  let running: Promise<T> | undefined
  let settled = false
  for (;;) {
    if (running === undefined && app.eventLoopDelayMs() > maxEventLoopDelayMs) {
      running = work()
      running.then(() => { settled = true }, () => { settled = true })
    }
    if (running !== undefined && settled) return await running
    const busyUntil = Date.now() + 50
    while (Date.now() < busyUntil) { /* busy */ }
    await new Promise((resolve) => setImmediate(resolve))
  }
}
