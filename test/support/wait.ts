// Waiting for what a test needs, never for a time a busy machine may not keep.
import type { FastifyInstance } from 'fastify'

// A wait this long is a hang, not a slow machine: it fails saying what it waited for, where tap's timeout would end
// the whole file without a word of where.
export const HANG_MS = 60_000

export interface Patience {
  /** Between two tries. */
  everyMs?: number
  withinMs?: number
}

/** What a wait is for: a function says it as it stands when the wait gives up, from the last result it got. */
export type WaitedFor<T = unknown> = string | ((last: T) => string)

/** The first result of `attempt()` that `accepted` takes, trying again every `everyMs`; rejects after `withinMs` naming `what` it waited for. */
export async function retryUntil<T> (what: WaitedFor<T>, attempt: () => T | Promise<T>, accepted: (result: T) => boolean, { everyMs = 10, withinMs = HANG_MS }: Patience = {}): Promise<T> {
  const givesUpAt = performance.now() + withinMs
  for (;;) {
    const result = await attempt()
    if (accepted(result)) return result
    if (performance.now() > givesUpAt) throw new Error(`waited ${withinMs / 1000} s for ${typeof what === 'string' ? what : what(result)}`)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

/** Resolves once `holds()` does, looking again every `everyMs`; rejects after `withinMs` naming `what` it waited for. */
export async function until (what: WaitedFor<boolean>, holds: () => boolean | Promise<boolean>, patience: Patience = {}): Promise<void> {
  await retryUntil(what, holds, (held) => held, patience)
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
