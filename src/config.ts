import { randomBytes } from 'node:crypto'
import { isIP } from 'node:net'

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

// `true` or `false`, a number of proxy hops to trust, or the proxies' addresses and CIDR ranges, comma-separated.
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
  rateLimits: { login: RateLimit, loginAddress: RateLimit, register: RateLimit, refresh: RateLimit, writes: RateLimit } | null
  store: StoreConfig
  /** Fastify's trustProxy: whether, or which, proxies' X-Forwarded-For gives the client's address. */
  trustProxy: TrustedProxies
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
    passwordQueueLimit: read(source, 'PASSWORD_QUEUE_LIMIT', integer(1), 32),
    bodyLimit: read(source, 'BODY_LIMIT', integer(1024), 65536),
    requestTimeoutMs: read(source, 'REQUEST_TIMEOUT', integer(1000), 30000),
    rateLimits: read(source, 'RATE_LIMIT', oneOf('on', 'off'), 'on') === 'off'
      ? null
      : {
          login: { max: read(source, 'RATE_LIMIT_LOGIN', integer(1), 10), windowSeconds },
          loginAddress: { max: read(source, 'RATE_LIMIT_LOGIN_ADDRESS', integer(1), 60), windowSeconds },
          register: { max: read(source, 'RATE_LIMIT_REGISTER', integer(1), 20), windowSeconds },
          refresh: { max: read(source, 'RATE_LIMIT_REFRESH', integer(1), 60), windowSeconds },
          writes: { max: read(source, 'RATE_LIMIT_WRITES', integer(1), 60), windowSeconds }
        },
    store: {
      kind: storeKind,
      redisUrl: read(source, 'REDIS_URL', redisUrl, 'redis://127.0.0.1:6379'),
      redisKeyPrefix: read(source, 'REDIS_KEY_PREFIX', text(1), 'items-service:'),
      maxItemsPerUser: read(source, 'MAX_ITEMS_PER_USER', integer(1), 1000)
    },
    trustProxy: read(source, 'TRUST_PROXY', proxies, false),
    shutdownTimeoutMs: read(source, 'SHUTDOWN_TIMEOUT', integer(1), 10000),
    maxEventLoopDelayMs: read(source, 'MAX_EVENT_LOOP_DELAY', integer(0), 1000),
    maxHeapUsedBytes: mebibytes(read(source, 'MAX_HEAP_USED', integer(16))),
    strictResponses
  }
}
