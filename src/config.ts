import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { isPlainObject } from './plain-object.js'
import { parseSubscriptions, type Subscription } from './webhooks/subscriptions.js'

export class ConfigError extends Error {
  override name = 'ConfigError'
}

type Reader<T> = (raw: string, name: string) => T

const integer = (min: number, max = Number.MAX_SAFE_INTEGER): Reader<number> => (raw, name) => {
  const value = Number(raw)
  if (raw.trim() === '' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`Invalid configuration: ${name} must be an integer from ${min} to ${max}, got "${raw}"`)
  }
  return value
}

const oneOf = <const T extends string>(...choices: T[]): Reader<T> => (raw, name) => {
  if (!(choices as string[]).includes(raw)) {
    throw new ConfigError(`Invalid configuration: ${name} must be one of ${choices.join(', ')}, got "${raw}"`)
  }
  return raw as T
}

const text = (minLength: number): Reader<string> => (raw, name) => {
  if (raw.length < minLength) {
    throw new ConfigError(`Invalid configuration: ${name} must be at least ${minLength} characters long`)
  }
  return raw
}

const redisUrl: Reader<string> = (raw, name) => {
  if (!/^rediss?:\/\/./.test(raw) || !URL.canParse(raw)) {
    throw new ConfigError(`Invalid configuration: ${name} must be a redis:// or rediss:// URL`)
  }
  return raw
}

// What Fastify's trustProxy (proxy-addr) takes in a list: an address, a CIDR range, or a named range.
const NAMED_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal'])
function isProxyAddress (entry: string): boolean {
  const [address = '', bits, ...rest] = entry.split('/')
  const version = isIP(address)
  if (bits === undefined) return NAMED_RANGES.has(entry) || version !== 0
  return rest.length === 0 && version !== 0 && /^\d{1,3}$/.test(bits) && Number(bits) <= (version === 4 ? 32 : 128)
}

type TrustedProxies = boolean | string | ((address: string, hop: number) => boolean)

// `false`, the proxies' addresses and CIDR ranges, comma-separated, or (see TRUST_PROXY_UNSAFE) `true` or a number
// of proxy hops to trust.
const proxies: Reader<TrustedProxies> = (raw, name) => {
  if (raw === 'true' || raw === 'false') return raw === 'true'
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw)
    return (_address, hop) => hop < hops
  }
  const addresses = raw.split(',').map((address) => address.trim())
  if (addresses.every(isProxyAddress)) return addresses.join(',')
  throw new ConfigError(`Invalid configuration: ${name} must be true, false, a number of hops, or comma-separated addresses, got "${raw}"`)
}

const subscriptions: Reader<Subscription[]> = (raw, name) => {
  try {
    return parseSubscriptions(raw)
  } catch (error) {
    throw new ConfigError(`Invalid configuration: ${name}${(error as Error).message}`)
  }
}

const subscriptionsFile: Reader<Subscription[]> = (path, name) => {
  let json: string
  try {
    json = readFileSync(path, 'utf8')
  } catch (error) {
    throw new ConfigError(`Invalid configuration: ${name} cannot be read: ${(error as Error).message}`)
  }
  return subscriptions(json, `${name} (${path})`)
}

// Browser origins, comma-separated, each as a browser sends it in `Origin`: scheme, host and port if not the default.
const origins: Reader<string[]> = (raw, name) => {
  const listed = raw.split(',').map((origin) => origin.trim())
  const invalid = listed.find((origin) => !URL.canParse(origin) || new URL(origin).origin !== origin)
  if (invalid === undefined) return listed
  throw new ConfigError(`Invalid configuration: ${name} must be comma-separated origins such as http://localhost:5173, got "${invalid}"`)
}

// Milliseconds to wait before each retry, comma-separated: one attempt more than there are delays.
const delays: Reader<number[]> = (raw, name) => {
  const values = raw.split(',').map((value) => value.trim())
  if (values.length > 0 && values.every((value) => /^\d{1,9}$/.test(value))) return values.map(Number)
  throw new ConfigError(`Invalid configuration: ${name} must be comma-separated whole milliseconds, got "${raw}"`)
}

// Standard Webhooks' schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
const DEFAULT_RETRY_DELAYS_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]

const mebibytes = (value: number | undefined): number | undefined => value === undefined ? undefined : value * 1024 * 1024

function read<T> (source: NodeJS.ProcessEnv, name: string, reader: Reader<T>, fallback: T): T
function read<T> (source: NodeJS.ProcessEnv, name: string, reader: Reader<T>): T | undefined
function read<T> (source: NodeJS.ProcessEnv, name: string, reader: Reader<T>, fallback?: T): T | undefined {
  const raw = source[name]
  return raw === undefined ? fallback : reader(raw, name)
}

const ENVIRONMENTS = ['development', 'test', 'production'] as const
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

export interface RateLimit {
  max: number
  windowSeconds: number
}

export interface StoreConfig {
  /** Where data is kept: this process's memory, or Redis, shared by every instance. */
  kind: 'memory' | 'redis'
  redisUrl: string
  /** Starts every key the service writes in Redis. */
  redisKeyPrefix: string
  /** Items one contributor may own at once. */
  maxItemsPerUser: number
  /** Users and items the memory store holds at most (Redis is bounded by its own maxmemory). */
  memoryMaxUsers: number
  memoryMaxItems: number
}

export interface WebhooksConfig {
  subscriptions: Subscription[]
  /** How long a delivery attempt may wait to connect, for the response's headers, or during a pause in its body. */
  timeoutMs: number
  /** The wait before each retry; a delivery is given up after one attempt more than there are delays. */
  retryDelaysMs: number[]
  /** How long a delivery taken by one instance may stay unsettled before another takes it over. */
  reclaimAfterMs: number
}

export interface AppConfig {
  environment: typeof ENVIRONMENTS[number]
  host: string
  port: number
  logLevel: typeof LOG_LEVELS[number]
  jwt: {
    secret: string
    /** True when no JWT_SECRET was given and a random one was made for this process. */
    secretGenerated: boolean
    accessTokenTtlSeconds: number
    issuer: string
    audience: string
  }
  refreshTokenTtlSeconds: number
  refreshReuseLeewaySeconds: number
  maxSessionsPerUser: number
  sessionSweepIntervalMs: number
  /** Sign-ins and registrations that may wait for a password hash at once. */
  passwordQueueLimit: number
  bodyLimit: number
  /** How long a request's headers and body together may take to arrive. */
  requestTimeoutMs: number
  rateLimits: {
    login: RateLimit
    loginAddress: RateLimit
    /** Failed sign-ins of one account, from any address. */
    loginFailures: RateLimit
    register: RateLimit
    refresh: RateLimit
    writes: RateLimit
  } | null
  store: StoreConfig
  webhooks: WebhooksConfig
  /** Users and items to start with (SEED_FILE), for integration tests; refused in production. */
  seedFile: string | undefined
  /** Browser origins allowed to call the API (CORS); none by default. */
  corsOrigins: string[]
  /** Fastify's trustProxy: whether, or which, proxies' X-Forwarded-For gives the client's address. */
  trustProxy: TrustedProxies
  /** Bits of an IPv6 client address that make one client for rate limits and the hashing queue's turns. */
  clientIpv6PrefixLength: number
  shutdownTimeoutMs: number
  maxEventLoopDelayMs: number
  /** Heap in use, in bytes, past which every request but a GET is shed; undefined for the derived default. */
  maxHeapUsedBytes: number | undefined
  /** Check every response against the contract and answer a logged 500 instead of one that breaks it. */
  strictResponses: boolean
}

/**
 * Reads and validates every setting the service takes from the environment (README.md documents each one);
 * throws a ConfigError naming the variable when a value is bad.
 */
export function loadConfig (source: NodeJS.ProcessEnv = process.env): AppConfig {
  const environment = read(source, 'NODE_ENV', oneOf(...ENVIRONMENTS), 'development')
  const jwtSecret = read(source, 'JWT_SECRET', text(32))
  if (environment === 'production' && jwtSecret === undefined) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when NODE_ENV is production')
  }
  const storeKind = read(source, 'STORE', oneOf('memory', 'redis'), 'memory')
  // Every instance must verify the tokens every other one signs.
  if (storeKind === 'redis' && jwtSecret === undefined) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when STORE is redis (every instance must share it)')
  }
  const strictResponses = read(source, 'CONTRACT_STRICT_RESPONSES', oneOf('0', '1'), '0') === '1'
  if (environment === 'production' && strictResponses) {
    throw new ConfigError('Invalid configuration: CONTRACT_STRICT_RESPONSES is for development and test, not production')
  }
  const windowSeconds = read(source, 'RATE_LIMIT_WINDOW', integer(1), 60)
  const trustProxy = read(source, 'TRUST_PROXY', proxies, false)
  // Trusting every hop lets each client name its own address in X-Forwarded-For, and with it its own rate-limit key.
  if ((trustProxy === true || typeof trustProxy === 'function') && read(source, 'TRUST_PROXY_UNSAFE', oneOf('0', '1'), '0') !== '1') {
    throw new ConfigError('Invalid configuration: TRUST_PROXY=true or a hop count lets any client choose its address (and its rate limits); ' +
      'list the proxies\' addresses or CIDR ranges instead, or set TRUST_PROXY_UNSAFE=1 if no client can reach the service but through them')
  }
  const seedFile = read(source, 'SEED_FILE', text(1))
  if (environment === 'production' && seedFile !== undefined) {
    throw new ConfigError('Invalid configuration: SEED_FILE is for development and test, not production')
  }
  if (source.WEBHOOKS !== undefined && source.WEBHOOKS_FILE !== undefined) {
    throw new ConfigError('Invalid configuration: set WEBHOOKS or WEBHOOKS_FILE, not both')
  }
  const webhookTimeoutMs = read(source, 'WEBHOOK_TIMEOUT_MS', integer(100, 600_000), 10_000)
  const reclaimAfterMs = read(source, 'WEBHOOK_RECLAIM_AFTER_MS', integer(1000), 60_000)
  // WEBHOOK_TIMEOUT_MS bounds a whole attempt: until it has passed, its delivery must not be taken over by another
  // instance.
  if (reclaimAfterMs <= webhookTimeoutMs) {
    throw new ConfigError('Invalid configuration: WEBHOOK_RECLAIM_AFTER_MS must be longer than WEBHOOK_TIMEOUT_MS')
  }
  return {
    environment,
    host: read(source, 'HOST', text(1), '127.0.0.1'),
    port: read(source, 'PORT', integer(0, 65535), 3000),
    logLevel: read(source, 'LOG_LEVEL', oneOf(...LOG_LEVELS), 'info'),
    jwt: {
      secret: jwtSecret ?? randomBytes(32).toString('base64url'),
      secretGenerated: jwtSecret === undefined,
      accessTokenTtlSeconds: read(source, 'ACCESS_TOKEN_TTL', integer(1), 900),
      issuer: 'items-service',
      audience: 'items-service'
    },
    refreshTokenTtlSeconds: read(source, 'REFRESH_TOKEN_TTL', integer(1), 604800),
    refreshReuseLeewaySeconds: read(source, 'REFRESH_REUSE_LEEWAY', integer(0, 60), 5),
    maxSessionsPerUser: read(source, 'MAX_SESSIONS_PER_USER', integer(1), 20),
    sessionSweepIntervalMs: read(source, 'SESSION_SWEEP_INTERVAL', integer(10), 60000),
    passwordQueueLimit: read(source, 'PASSWORD_QUEUE_LIMIT', integer(1), 128),
    bodyLimit: read(source, 'BODY_LIMIT', integer(1024), 65536),
    requestTimeoutMs: read(source, 'REQUEST_TIMEOUT', integer(1000), 30000),
    rateLimits: read(source, 'RATE_LIMIT', oneOf('on', 'off'), 'on') === 'off'
      ? null
      : {
          login: { max: read(source, 'RATE_LIMIT_LOGIN', integer(1), 10), windowSeconds },
          loginAddress: { max: read(source, 'RATE_LIMIT_LOGIN_ADDRESS', integer(1), 60), windowSeconds },
          loginFailures: {
            max: read(source, 'RATE_LIMIT_LOGIN_FAILURES', integer(1), 10),
            windowSeconds: read(source, 'RATE_LIMIT_LOGIN_FAILURES_WINDOW_SECONDS', integer(1), 900)
          },
          register: { max: read(source, 'RATE_LIMIT_REGISTER', integer(1), 20), windowSeconds },
          refresh: { max: read(source, 'RATE_LIMIT_REFRESH', integer(1), 60), windowSeconds },
          writes: { max: read(source, 'RATE_LIMIT_WRITES', integer(1), 60), windowSeconds }
        },
    store: {
      kind: storeKind,
      redisUrl: read(source, 'REDIS_URL', redisUrl, 'redis://127.0.0.1:6379'),
      redisKeyPrefix: read(source, 'REDIS_KEY_PREFIX', text(1), 'items-service:'),
      maxItemsPerUser: read(source, 'MAX_ITEMS_PER_USER', integer(1), 1000),
      memoryMaxUsers: read(source, 'MEMORY_STORE_MAX_USERS', integer(1), 100_000),
      memoryMaxItems: read(source, 'MEMORY_STORE_MAX_ITEMS', integer(1), 1_000_000)
    },
    webhooks: {
      subscriptions: read(source, 'WEBHOOKS', subscriptions) ?? read(source, 'WEBHOOKS_FILE', subscriptionsFile, []),
      timeoutMs: webhookTimeoutMs,
      retryDelaysMs: read(source, 'WEBHOOK_RETRY_DELAYS_MS', delays, DEFAULT_RETRY_DELAYS_MS),
      reclaimAfterMs
    },
    seedFile,
    corsOrigins: read(source, 'CORS_ORIGINS', origins, []),
    trustProxy,
    clientIpv6PrefixLength: read(source, 'CLIENT_IPV6_PREFIX_LENGTH', integer(1, 128), 64),
    shutdownTimeoutMs: read(source, 'SHUTDOWN_TIMEOUT', integer(1), 10000),
    maxEventLoopDelayMs: read(source, 'MAX_EVENT_LOOP_DELAY', integer(0), 1000),
    maxHeapUsedBytes: mebibytes(read(source, 'MAX_HEAP_USED', integer(16))),
    strictResponses
  }
}

/** What `buildApp` takes: any part of the configuration, at any depth; the rest keeps its default. */
export type AppSettings = Settings<AppConfig>
type Settings<T> = T extends readonly unknown[] | ((...args: never[]) => unknown) ? T : T extends object ? { [K in keyof T]?: Settings<T[K]> } : T

// `settings` laid over `defaults`: plain objects part by part, anything else (a list, a function, null) whole.
function merged<T> (defaults: T, settings: Settings<T> | undefined): T {
  if (settings === undefined) return defaults
  // Settings<T> is T itself for everything but plain objects.
  if (!isPlainObject(defaults) || !isPlainObject(settings)) return settings as T
  const result: Record<string, unknown> = { ...defaults }
  for (const [key, value] of Object.entries(settings)) result[key] = merged(defaults[key], value)
  return result as T
}

/**
 * The defaults (what `loadConfig({})` gives: development, a random JWT secret) with `settings` laid over them, part
 * by part; lists and other values are replaced whole.
 */
export function withDefaults (settings: AppSettings = {}): AppConfig {
  const config = merged<AppConfig>(loadConfig({}), settings)
  // A secret that was given was not generated, unless the settings say so (a whole configuration from loadConfig).
  const secretGenerated = settings.jwt?.secretGenerated ?? settings.jwt?.secret === undefined
  return { ...config, jwt: { ...config.jwt, secretGenerated } }
}
