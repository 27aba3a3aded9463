// When the client sends a request again, and how long it waits first.
import type { ErrorCode } from './answers.js'

// A lost answer may hide a request that was done: only these are sent again after one.
export const safeToResend = (request: Request): boolean =>
  ['GET', 'HEAD', 'OPTIONS', 'DELETE'].includes(request.method) || request.headers.has('idempotency-key') ||
  // An edit made only if the item is still as read: sent twice, the second finds it changed and is refused.
  ((request.method === 'PATCH' || request.method === 'PUT') && request.headers.has('if-match'))

// An answer sent again after its wait: a limit or an outage, and a 504 (the service could not learn whether it was
// done) for a request that is safe to send again.
export const retried = (response: Response, request: Request): boolean =>
  response.status === 429 || response.status === 503 || (response.status === 504 && safeToResend(request))

// Seconds until the limits a RateLimit field names have room again: the longest `t` of those with `r=0`.
export function spentSeconds (field: string | null): number {
  let seconds = 0
  for (const limit of field?.split(',') ?? []) {
    if (/;\s*r=0(;|$)/.test(limit)) seconds = Math.max(seconds, Number(/;\s*t=(\d+)/.exec(limit)?.[1] ?? 0))
  }
  return seconds
}

/** Waits `ms`, or rejects with the signal's reason the moment it aborts. */
export async function sleep (ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted()
  await new Promise<void>((resolve, reject) => {
    const aborted = (): void => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted)
      resolve()
    }, ms)
    signal?.addEventListener('abort', aborted, { once: true })
  })
}

// Exponential backoff with full jitter (AWS's "Exponential Backoff and Jitter"): many clients that failed together
// do not all come back together.
export const backoffMs = (attempt: number): number => Math.random() * 100 * 2 ** attempt

// The code a refresh answers; typed, so that the compiler notices when the contract renames it.
const EXPIRED: ErrorCode = 'TOKEN_EXPIRED'

export async function isExpiredToken (response: Response): Promise<boolean> {
  if (response.status !== 401) return false
  const body: unknown = await response.clone().json().catch(() => undefined)
  return typeof body === 'object' && body !== null && 'code' in body && body.code === EXPIRED
}
