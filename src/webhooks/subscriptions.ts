import { createHash } from 'node:crypto'
import { channels as CHANNELS } from '../../generated/routes.js'
import { parseJson } from '../runtime/json-text.js'
import { isPlainObject } from '../runtime/plain-object.js'

export type Channel = typeof CHANNELS[number]

/** One receiver of webhooks (WEBHOOKS, WEBHOOKS_FILE): where events are POSTed, how they are signed, which ones. */
export interface Subscription {
  /** Stable across instances and restarts (it keys the subscriber's deliveries in the store): from its URL. */
  readonly id: string
  readonly url: string
  /** Standard Webhooks' `whsec_<base64>`; never logged. */
  readonly secret: string
  readonly channels: readonly Channel[]
}

// Standard Webhooks: a secret of 24 to 64 random bytes, base64 after the `whsec_` prefix.
const SECRET = /^whsec_([A-Za-z0-9+/]+={0,2})$/
const MIN_SECRET_BYTES = 24
const MAX_SECRET_BYTES = 64
const MAX_SUBSCRIPTIONS = 16

/** The key a secret signs with: the bytes its base64 gives; none when it is not `whsec_` and base64. */
export function secretKey (secret: string): Buffer {
  const key = SECRET.exec(secret)?.[1]
  return key === undefined ? Buffer.alloc(0) : Buffer.from(key, 'base64')
}

const isChannel = (value: unknown): value is Channel => CHANNELS.some((channel) => channel === value)

/**
 * A subscriber's name, in the operations API, the metrics' labels and the logs: its origin and path, and, when its
 * URL has a query, which may hold a secret, a digest of the query instead of the query itself, so that two
 * subscribers that differ only there keep two names (`https://hooks.example.com/items?query-sha256=Xy3…`).
 */
export const subscriberName = (url: string): string => {
  const { origin, pathname, search } = new URL(url)
  return search === '' ? origin + pathname : `${origin}${pathname}?query-sha256=${createHash('sha256').update(search).digest('base64url').slice(0, 12)}`
}

/** What is wrong with a subscription: `path` names the field at fault (none for the whole entry). */
export interface SubscriptionProblem {
  readonly path: readonly string[]
  readonly issue: string
}

/** A subscription (an entry of WEBHOOKS, or a sandbox's receiver) read from what it was given, or what is wrong with it. */
export function readSubscription (entry: unknown): Subscription | SubscriptionProblem {
  if (!isPlainObject(entry)) return { path: [], issue: 'must be an object with url, secret and, optionally, channels' }
  const unknownKeys = Object.keys(entry).filter((key) => !['url', 'secret', 'channels'].includes(key))
  if (unknownKeys.length > 0) return { path: [], issue: `has unknown field(s) ${unknownKeys.join(', ')}` }
  const { url, secret, channels = CHANNELS } = entry
  if (typeof url !== 'string' || !URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    return { path: ['url'], issue: 'must be an http:// or https:// URL' }
  }
  // The sender would drop them (it sends no Authorization), and a secret does not belong in a URL that is logged.
  if (new URL(url).username !== '' || new URL(url).password !== '') {
    return { path: ['url'], issue: 'must not hold credentials (user:password@); the signature authenticates each delivery' }
  }
  const bytes = typeof secret === 'string' ? secretKey(secret).length : 0
  if (bytes < MIN_SECRET_BYTES || bytes > MAX_SECRET_BYTES) {
    return { path: ['secret'], issue: `must be whsec_ followed by ${MIN_SECRET_BYTES} to ${MAX_SECRET_BYTES} bytes in base64` }
  }
  if (!Array.isArray(channels) || channels.length === 0 || !channels.every(isChannel)) {
    return { path: ['channels'], issue: `must be a non-empty list of ${CHANNELS.join(', ')}` }
  }
  return {
    id: createHash('sha256').update(url).digest('base64url').slice(0, 16),
    url,
    secret: String(secret),
    channels: [...new Set(channels)]
  }
}

/**
 * Reads the JSON list of subscriptions; throws an error whose message goes after the variable's name: `[2]: …` names
 * the entry at fault (never quoting a secret).
 */
export function parseSubscriptions (json: string): Subscription[] {
  let entries: unknown
  try {
    entries = parseJson(json)
  } catch (error) {
    throw new Error(`: ${(error as Error).message}`)
  }
  if (!Array.isArray(entries)) throw new Error(': must be a JSON array of subscriptions')
  if (entries.length > MAX_SUBSCRIPTIONS) throw new Error(`: may list at most ${MAX_SUBSCRIPTIONS} subscriptions`)
  const subscriptions = entries.map((entry, index) => {
    const read = readSubscription(entry)
    if ('issue' in read) throw new Error(`[${index}]: ${[...read.path, read.issue].join(' ')}`)
    return read
  })
  const firstWithName = new Map<string, number>()
  for (const [index, { url }] of subscriptions.entries()) {
    const name = subscriberName(url)
    const first = firstWithName.get(name)
    if (first !== undefined) throw new Error(`[${index}]: url is already subscribed by [${first}]`)
    firstWithName.set(name, index)
  }
  return subscriptions
}
