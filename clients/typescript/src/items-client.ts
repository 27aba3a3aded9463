// The client of the public API (`createItemsClient`), which `index.ts` exports with everything else the package has.
import createClient, { type Client, type Middleware } from 'openapi-fetch'
import { answeredUnder, answeredWithTheCopy, etagOf, ItemsApiError, ItemsNetworkError, ok, type Session } from './answers.js'
import type { components, paths } from './generated/openapi.js'
import { type RequestInit, resources } from './generated/resources.js'
import { backoffMs, isExpiredToken, retried, safeToResend, sleep, spentSeconds } from './retries.js'

type Schemas = components['schemas']

// The paths whose POST takes an Idempotency-Key in the contract: the compiler refuses a path missing here or one
// listed that takes none.
type HeadersOf<Path extends keyof paths> = paths[Path] extends { post: { parameters: { header?: infer Headers } } } ? NonNullable<Headers> : never
type IdempotentPath = { [Path in keyof paths]: [HeadersOf<Path>] extends [never] ? never : 'Idempotency-Key' extends keyof HeadersOf<Path> ? Path : never }[keyof paths]
const IDEMPOTENT_CREATES: Record<IdempotentPath, true> = { '/v1/items': true }
const createsIdempotently = (path: string): path is IdempotentPath => Object.hasOwn(IDEMPOTENT_CREATES, path)

const REFRESH_PATH = '/v1/auth/refresh'
// An access token is renewed this long before the end its `expiresIn` gives, for the clock and the trip (a tenth
// of a short one's life).
const EXPIRY_MARGIN_MS = 5_000

export interface ItemsClientOptions {
  /** The service's address, e.g. `http://127.0.0.1:3000`. */
  baseUrl: string
  /** Attempts per request at most, the first included: 5. */
  maxAttempts?: number
  /**
   * The longest the client waits out a 429's or 503's `Retry-After`, or a `RateLimit` that says a limit is spent,
   * before it answers instead: 10 s. Past it the refusal is the answer (`ok` throws its ItemsApiError, whose
   * `retryAfterSeconds` says when to try again); `Infinity` waits as long as the service says.
   */
  maxWaitMs?: number
  /** The fetch to use (the global one by default). */
  fetch?: typeof globalThis.fetch
  /** Told of every new session (signed in, registered, refreshed), to keep it, and of its end (undefined). */
  onSession?: (session: Session | undefined) => void
}

/** The filters of a list (its `page` is the walk's own). */
export type ItemFilter = Omit<NonNullable<paths['/v1/items']['get']['parameters']['query']>, 'page'>

// Marks a request the caller sent with `retry: false`, and one with a copy to answer a 304 with; the client takes
// them off before the request leaves.
const SENT_ONCE = 'x-items-client-sent-once'
const COPY = 'x-items-client-copy'
// The copies `ifNoneMatch` gave, by the marker of their request, until it is answered.
const copies = new Map<string, object>()

function etagFor (condition: object | string): string {
  const etag = typeof condition === 'string' ? condition : etagOf(condition)
  if (etag === undefined) throw new TypeError('ifMatch and ifNoneMatch take an ETag, or a resource the client gave with one')
  return etag
}

const requestInit: RequestInit = ({ retry, signal, headers, ifMatch, ifNoneMatch }) => {
  const conditions = {
    ...(ifMatch === undefined ? {} : { 'if-match': etagFor(ifMatch) }),
    ...(ifNoneMatch === undefined ? {} : { 'if-none-match': etagFor(ifNoneMatch) })
  }
  const copy = typeof ifNoneMatch === 'object' ? { marker: crypto.randomUUID(), of: ifNoneMatch } : undefined
  if (copy !== undefined) copies.set(copy.marker, copy.of)
  return {
    headers: { ...headers, ...conditions, ...(retry === false ? { [SENT_ONCE]: 'true' } : {}), ...(copy === undefined ? {} : { [COPY]: copy.marker }) },
    ...(signal === undefined ? {} : { signal })
  }
}

// The caller's copy, as the service would have sent it, for a 304 that says it is current.
function answeredWithCopy (response: Response, copy: object | undefined): Response {
  if (response.status !== 304 || copy === undefined) return response
  const headers = new Headers(response.headers)
  headers.set('content-type', 'application/json')
  const answer = new Response(JSON.stringify(copy), { status: 200, headers })
  answeredWithTheCopy(answer, copy)
  return answer
}

// The contract declares no redirect: a 3xx is answered to the caller as it is, never followed.
const withoutRedirects = (fetch: typeof globalThis.fetch): typeof globalThis.fetch =>
  async (input, init) => await fetch(new Request(input, { ...init, redirect: 'manual' }))

type Resources = ReturnType<typeof resources>

export interface ItemsClient {
  /** Every operation, typed by the contract: `await ok(client.api.GET('/v1/items', { params: { query: { page: 2 } } }))`. */
  readonly api: Client<paths>
  /**
   * The items, each operation a method that gives its data or throws (generated from the contract):
   * `client.items.list({ status: 'active' })`, `client.items.create({ name })`, `client.items.get(id, { retry: false })`.
   */
  readonly items: Resources['items']
  /**
   * Every item of a list, filtered as asked, page after page: `for await (const item of client.allItems({ status: 'archived' }))`.
   * Pages are read as the walk goes: an item added or removed meanwhile may shift one page into the next.
   */
  allItems: (filter?: ItemFilter) => AsyncIterable<Schemas['Item']>
  /** Registers, and signs the client in as the new user. */
  register: (body: Schemas['RegisterRequest']) => Promise<Session>
  signIn: (email: string, password: string) => Promise<Session>
  /** Ends the session on the service, and forgets it. */
  signOut: () => Promise<void>
  /** Resumes a session kept from an earlier `onSession` (its access token is refreshed when it has expired). */
  resume: (session: Session) => void
  /** Renews the session now, and gives the new one (`session` and `onSession` have it too). */
  refresh: () => Promise<Session>
  readonly session: Session | undefined
}

// A wait the service asks for that a caller would still sit through without a signal of its own.
const MAX_WAIT_MS = 10_000

export function createItemsClient ({ baseUrl, maxAttempts = 5, maxWaitMs = MAX_WAIT_MS, fetch: given = globalThis.fetch, onSession }: ItemsClientOptions): ItemsClient {
  const fetch = withoutRedirects(given)
  let session: Session | undefined
  // When the access token ends, by this process's clock, less the margin.
  let renewAt = 0
  let refreshing: Promise<void> | undefined
  // Until when a RateLimit field said a limit was spent.
  let resumeAt = 0
  const sent = new Map<string, Request>()
  // The requests to send once, whatever answers.
  const sentOnce = new Set<string>()
  // The copy to answer each conditional read's 304 with.
  const copied = new Map<string, object>()

  const start = (next: Session | undefined): void => {
    session = next
    renewAt = next === undefined ? 0 : Date.now() + next.expiresIn * 1000 - Math.min(EXPIRY_MARGIN_MS, next.expiresIn * 100)
    onSession?.(next)
  }

  // Without the middleware: a refresh is never itself refreshed, and is retried on its own terms below.
  const plain = createClient<paths>({ baseUrl, fetch })
  /** Renews the session `stale`, once however many callers found it stale; a newer one is left alone. */
  const refresh = async (stale: Session): Promise<void> => {
    if (session !== stale) return
    refreshing ??= (async () => {
      try {
        for (let attempt = 1; ; attempt += 1) {
          // A refresh whose answer was lost may have rotated the token: sent again with the same token, within the
          // service's reuse leeway, it gets a working pair all the same.
          let answered
          try {
            answered = await plain.POST(REFRESH_PATH, { body: { refreshToken: stale.refreshToken } })
          } catch (lost) {
            if (attempt >= maxAttempts) throw new ItemsNetworkError(lost)
            await sleep(backoffMs(attempt))
            continue
          }
          const { data, error, response } = answered
          if (data !== undefined) return start(data)
          const waitMs = Number(response.headers.get('retry-after') ?? 1) * 1000
          if ((response.status === 429 || response.status === 503 || response.status === 504) && attempt < maxAttempts && waitMs <= maxWaitMs) {
            await sleep(waitMs)
            continue
          }
          // The session has ended (revoked, expired, or its refresh token reused): sign in again.
          start(undefined)
          throw new ItemsApiError(response.status, error, response)
        }
      } finally {
        refreshing = undefined
      }
    })()
    await refreshing
  }

  const authorized = (request: Request): Request => {
    const headers = new Headers(request.headers)
    if (session !== undefined) headers.set('authorization', `Bearer ${session.accessToken}`)
    return new Request(request, { headers })
  }

  // Sends `id`'s request again while its outcome says to, each time with the session's current token.
  const settle = async (id: string, send: typeof globalThis.fetch, first: unknown): Promise<Response> => {
    const original = sent.get(id)
    sent.delete(id)
    const copy = copied.get(id)
    copied.delete(id)
    const answered = (response: Response): Response => {
      const key = original?.headers.get('idempotency-key')
      if (key !== null && key !== undefined) answeredUnder(response, key)
      return answeredWithCopy(response, copy)
    }
    const lost = (error: unknown): unknown =>
      original?.signal.aborted === true ? original.signal.reason : new ItemsNetworkError(error, original?.headers.get('idempotency-key') ?? undefined)
    let outcome = first
    if (original === undefined) return outcome instanceof Response ? outcome : Promise.reject(outcome)
    if (sentOnce.delete(id)) {
      if (outcome instanceof Response) return answered(outcome)
      throw lost(outcome)
    }
    let refreshed = false
    // Whether a request sent earlier may have been done though its answer was lost.
    let lostBefore = false
    for (let attempt = 1; attempt < maxAttempts; attempt += 1) {
      const current = session
      if (original.signal.aborted) break
      if (outcome instanceof Response && original.headers.has('authorization') && current !== undefined && !refreshed && await isExpiredToken(outcome)) {
        refreshed = true
        await refresh(current)
      } else if (outcome instanceof Response ? retried(outcome, original) : safeToResend(original)) {
        const retryAfter = outcome instanceof Response ? outcome.headers.get('retry-after') : null
        const waitMs = retryAfter === null ? backoffMs(attempt) : Number(retryAfter) * 1000
        // Longer than the caller would wait: the refusal is the answer.
        if (waitMs > maxWaitMs) break
        lostBefore ||= !(outcome instanceof Response)
        await sleep(waitMs, original.signal)
      } else {
        break
      }
      outcome = await send(authorized(original.clone())).catch((error: unknown) => error)
    }
    if (!(outcome instanceof Response)) throw lost(outcome)
    // A delete sent again after its first answer was lost finds the item gone: that one did it.
    if (lostBefore && original.method === 'DELETE' && outcome.status === 404) return new Response(null, { status: 204 })
    const spent = spentSeconds(outcome.headers.get('ratelimit'))
    if (spent > 0) resumeAt = Math.max(resumeAt, Date.now() + spent * 1000)
    return answered(outcome)
  }

  const resilience: Middleware = {
    async onRequest ({ request, id, schemaPath }) {
      // A limit spent for longer than the caller would wait: the service's own refusal will say until when.
      const resumeInMs = resumeAt - Date.now()
      if (resumeInMs <= maxWaitMs) await sleep(Math.max(0, resumeInMs), request.signal)
      if (session !== undefined && Date.now() >= renewAt) await refresh(session)
      const headers = new Headers(request.headers)
      if (headers.has(SENT_ONCE)) {
        sentOnce.add(id)
        headers.delete(SENT_ONCE)
      }
      const copy = headers.get(COPY)
      if (copy !== null) {
        copied.set(id, copies.get(copy)!)
        copies.delete(copy)
        headers.delete(COPY)
      }
      // One key per create, made here once: every retry sends the same request, and so the same key.
      if (request.method === 'POST' && createsIdempotently(schemaPath) && !headers.has('idempotency-key')) headers.set('idempotency-key', crypto.randomUUID())
      const ready = authorized(new Request(request, { headers }))
      sent.set(id, ready.clone())
      return ready
    },
    async onResponse ({ response, id, options }) {
      return await settle(id, options.fetch, response)
    },
    async onError ({ error, id, options }) {
      return await settle(id, options.fetch, error)
    }
  }
  const api = createClient<paths>({ baseUrl, fetch })
  api.use(resilience)

  return {
    api,
    ...resources(api, ok, requestInit),
    allItems: async function * (filter = {}) {
      for (let page = 1; ; page += 1) {
        const { data, pagination } = await ok(api.GET('/v1/items', { params: { query: { ...filter, page } } }))
        yield * data
        if (data.length === 0 || page * pagination.pageSize >= pagination.total) return
      }
    },
    get session () { return session },
    register: async (body) => {
      const registered = await ok(api.POST('/v1/auth/register', { body }))
      start(registered)
      return registered
    },
    signIn: async (email, password) => {
      const signedIn = await ok(api.POST('/v1/auth/login', { body: { email, password } }))
      start(signedIn)
      return signedIn
    },
    signOut: async () => {
      const ending = session
      if (ending === undefined) return
      await ok(api.POST('/v1/auth/logout'))
      start(undefined)
    },
    resume: (kept) => {
      session = kept
      // Its age is unknown: renewed before its first use.
      renewAt = 0
    },
    refresh: async () => {
      if (session === undefined) throw new TypeError('refresh() needs a session: sign in, register or resume first')
      await refresh(session)
      return session
    }
  }
}
