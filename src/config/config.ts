import { randomBytes } from 'node:crypto'
import { Ajv, type ErrorObject } from 'ajv'
import { OWASP_HASH_COST, type PasswordHashCost } from '../auth/hash-cost.js'
import { type Environment, environmentSchema, invalidValue, removedVariables, type VariableName, type VariableSchema, variables } from './environment.js'
import { isPlainObject } from '../runtime/plain-object.js'
import { ConfigError, delays, origins, proxies, redisUrl, secrets, sentinels, subscriptions, subscriptionsFile, type TrustedProxies } from './values.js'
import type { AccountBounds } from '../domain/quotas.js'
import type { RedisSentinel } from '../store/redis/connection.js'
import type { SandboxBounds } from '../store/sandboxes.js'
import type { Subscription } from '../webhooks/subscriptions.js'
import type { DeliverySettings } from '../webhooks/worker.js'

const MIB = 1024 * 1024

export interface RateLimit {
  max: number
  windowSeconds: number
}

// The window of the service-wide limit on registrations, and how many of them fill MAX_ACCOUNTS at the most it lets
// through: a flood takes at least a day.
const REGISTRATIONS_WINDOW_SECONDS = 3600
const REGISTRATION_WINDOWS_TO_FILL = 25

/** The limit on registrations to the whole service: a 25th of the accounts it admits an hour, at least one. */
export const registrationsLimit = (maxAccounts: number): RateLimit =>
  ({ max: Math.max(1, Math.floor(maxAccounts / REGISTRATION_WINDOWS_TO_FILL)), windowSeconds: REGISTRATIONS_WINDOW_SECONDS })

export interface StoreConfig {
  /** Where data is kept: this process's memory, or Redis, shared by every instance. */
  kind: 'memory' | 'redis'
  redisUrl: string
  /** The sentinels that name the Redis primary, instead of redisUrl's host. */
  redisSentinel: RedisSentinel | undefined
  /** Replicas that must have each write before it is answered. */
  redisReplicasToAcknowledge: number
  /** Starts every key the service writes in Redis. */
  redisKeyPrefix: string
  /** Items one contributor may own at once. */
  maxItemsPerUser: number
  /** How long a create made under an idempotency key is remembered, and how many keys each user keeps. */
  idempotencyKeys: { ttlMs: number, perUser: number }
  /** How many accounts the store admits, and each one's quota (src/domain/quotas.ts). */
  accounts: AccountBounds
}

export interface WebhooksConfig extends DeliverySettings {
  subscriptions: Subscription[]
}

export interface TracingConfig {
  protocol: Environment['OTEL_EXPORTER_OTLP_PROTOCOL']
  serviceName: string
}

export interface AppConfig {
  environment: Environment['NODE_ENV']
  host: string
  port: number
  /** The operations API (metrics, dead letters), on a server of its own; off when undefined. */
  operations: { host: string, port: number, token: string | undefined } | undefined
  /** OpenTelemetry tracing; off when undefined. */
  tracing: TracingConfig | undefined
  /** Sandboxes (SANDBOXES=on); off when undefined. */
  sandboxes: SandboxBounds | undefined
  logLevel: Environment['LOG_LEVEL']
  jwt: {
    secret: string
    /** True when no JWT_SECRET was given and a random one was made for this process. */
    secretGenerated: boolean
    /** Secrets that verify access tokens beside `secret`, and never sign (JWT_VERIFY_SECRETS). */
    verifySecrets: readonly string[]
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
  /** What hashing a new password costs (argon2id). */
  passwordHashCost: PasswordHashCost
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
    /** Registrations to the whole service (each sandbox's fill only its own accounts, and are not counted). */
    registrations: RateLimit
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
  /** Logged as warnings at start: one line for each setting read under a name it has since replaced, or left open. */
  warnings: string[]
}

// Validates with the schema's types and defaults, no coercion: readEnvironment turns whole numbers into numbers,
// so that anything else given for an integer ("1e3", " ", "0x10") is refused, not read as some number. Ajv itself
// rather than env-schema, which with `env: false` did only this, and built an Ajv instance of its own as it loaded.
const validateEnvironment = new Ajv({ allErrors: false, useDefaults: true, coerceTypes: false, removeAdditional: true })
  .compile<Environment>(environmentSchema)

/**
 * The variables of the schema that `source` sets, validated, with their defaults. A variable set under the name it
 * replaces is read, and said in `deprecations`; an error names the variable as it was set.
 */
function readEnvironment (source: NodeJS.ProcessEnv): { environment: Environment, deprecations: string[] } {
  const given: Record<string, string | number> = {}
  const setAs = new Map<string, string>()
  const deprecations: string[] = []
  for (const [name, variable] of Object.entries<VariableSchema>(variables)) {
    const oldName = variable.replaces
    const usedName = source[name] === undefined && oldName !== undefined && source[oldName] !== undefined ? oldName : name
    const raw = source[usedName]
    if (raw === undefined) continue
    if (usedName !== name) deprecations.push(`${usedName} is deprecated and will be removed: set ${name} instead`)
    setAs.set(name, usedName)
    given[name] = variable.type === 'integer' && /^-?\d{1,15}$/.test(raw) ? Number(raw) : raw
  }
  for (const [name, replacement] of Object.entries(removedVariables)) {
    if (source[name] !== undefined) deprecations.push(`${name} is no longer read: ${replacement} (docs/capacity.md)`)
  }
  const environment: unknown = { ...given }
  if (validateEnvironment(environment)) return { environment, deprecations }
  // The schema's properties are the variables, so the first error's path (`/PORT`) names one of them, and one that
  // was set.
  const [first] = validateEnvironment.errors as [ErrorObject]
  const failed = first.instancePath.slice(1) as VariableName
  throw new ConfigError(`Invalid configuration: ${invalidValue(failed, setAs.get(failed)!, String(given[failed]))}`)
}

const isLoopback = (host: string): boolean => host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host)

/**
 * The operations API answers whoever reaches it unless OPS_TOKEN is set: off loopback without one, a production
 * start stops, any other warns. Its port must not be the API's, which would fail the start with a bare EADDRINUSE.
 */
function operationsWarnings (env: Environment, environment: Environment['NODE_ENV']): string[] {
  if (env.OPS_PORT === undefined) return []
  if (env.OPS_PORT !== 0 && env.OPS_PORT === env.PORT) {
    throw new ConfigError(`Invalid configuration: OPS_PORT must differ from PORT (${env.PORT}): the operations API has a server of its own`)
  }
  if (isLoopback(env.OPS_HOST) || env.OPS_TOKEN !== undefined) return []
  if (environment === 'production') {
    throw new ConfigError(`Invalid configuration: OPS_HOST ${env.OPS_HOST} is not loopback: set OPS_TOKEN, or the operations API is open to whoever reaches it`)
  }
  return [`OPS_HOST ${env.OPS_HOST} is not loopback and OPS_TOKEN is not set: whoever reaches OPS_PORT may read the metrics and redeliver dead letters`]
}

/**
 * Reads and validates every setting the service takes from the environment (src/config/environment.ts lists each one);
 * throws a ConfigError naming the variable when a value is bad.
 */
export function loadConfig (source: NodeJS.ProcessEnv = process.env): AppConfig {
  const { environment: env, deprecations } = readEnvironment(source)
  const environment = env.NODE_ENV
  const jwtSecret = env.JWT_SECRET
  if (environment === 'production' && jwtSecret === undefined) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when NODE_ENV is production')
  }
  // Set but empty is unset: compose passes `${REDIS_SENTINELS:-}` to every instance, one Redis or Sentinel.
  const sentinelsListed = env.REDIS_SENTINELS ?? ''
  // Every instance must verify the tokens every other one signs.
  if (env.STORE === 'redis' && jwtSecret === undefined) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when STORE is redis (every instance must share it)')
  }
  const strictResponses = env.CONTRACT_STRICT_RESPONSES === '1'
  if (environment === 'production' && strictResponses) {
    throw new ConfigError('Invalid configuration: CONTRACT_STRICT_RESPONSES is for development and test, not production')
  }
  if (env.SANDBOXES === 'on' && env.OPS_PORT === undefined) {
    throw new ConfigError('Invalid configuration: SANDBOXES=on needs OPS_PORT: sandboxes are created on the operations API')
  }
  const windowSeconds = env.RATE_LIMIT_WINDOW_SECONDS
  const trustProxy = proxies(env.TRUST_PROXY, 'TRUST_PROXY')
  // Trusting every hop lets each client name its own address in X-Forwarded-For, and with it its own rate-limit key.
  if ((trustProxy === true || typeof trustProxy === 'function') && env.TRUST_PROXY_UNSAFE !== '1') {
    throw new ConfigError('Invalid configuration: TRUST_PROXY=true or a hop count lets any client choose its address (and its rate limits); ' +
      'list the proxies\' addresses or CIDR ranges instead, or set TRUST_PROXY_UNSAFE=1 if no client can reach the service but through them')
  }
  const passwordHashCost = { memoryKib: env.PASSWORD_HASH_MEMORY_KIB, passes: env.PASSWORD_HASH_PASSES }
  if (environment === 'production' && (passwordHashCost.memoryKib < OWASP_HASH_COST.memoryKib || passwordHashCost.passes < OWASP_HASH_COST.passes)) {
    throw new ConfigError(`Invalid configuration: PASSWORD_HASH_MEMORY_KIB and PASSWORD_HASH_PASSES below ${OWASP_HASH_COST.memoryKib} and ${OWASP_HASH_COST.passes} (OWASP's minimum) are for tests, not production`)
  }
  const seedFile = env.SEED_FILE
  if (environment === 'production' && seedFile !== undefined) {
    throw new ConfigError('Invalid configuration: SEED_FILE is for development and test, not production')
  }
  if (env.WEBHOOKS !== undefined && env.WEBHOOKS_FILE !== undefined) {
    throw new ConfigError('Invalid configuration: set WEBHOOKS or WEBHOOKS_FILE, not both')
  }
  // WEBHOOK_TIMEOUT_MS bounds a whole attempt: until it has passed, its delivery must not be taken over by another
  // instance.
  if (env.WEBHOOK_RECLAIM_AFTER_MS <= env.WEBHOOK_TIMEOUT_MS) {
    throw new ConfigError('Invalid configuration: WEBHOOK_RECLAIM_AFTER_MS must be longer than WEBHOOK_TIMEOUT_MS')
  }
  const maxHeapUsedBytes = env.MAX_HEAP_USED_MIB === undefined ? undefined : env.MAX_HEAP_USED_MIB * MIB
  const warnings = [...deprecations, ...operationsWarnings(env, environment)]
  const rateLimit = (max: number, seconds = windowSeconds): RateLimit => ({ max, windowSeconds: seconds })
  return {
    environment,
    host: env.HOST,
    port: env.PORT,
    operations: env.OPS_PORT === undefined ? undefined : { host: env.OPS_HOST, port: env.OPS_PORT, token: env.OPS_TOKEN },
    tracing: env.OTEL_EXPORTER_OTLP_ENDPOINT === undefined && env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT === undefined
      ? undefined
      : { protocol: env.OTEL_EXPORTER_OTLP_PROTOCOL, serviceName: env.OTEL_SERVICE_NAME },
    sandboxes: env.SANDBOXES === 'off' ? undefined : { limit: env.SANDBOX_LIMIT, idleMs: env.SANDBOX_IDLE_SECONDS * 1000, accounts: env.SANDBOX_ACCOUNTS, quotaBytes: env.ACCOUNT_QUOTA_KIB * 1024 },
    logLevel: env.LOG_LEVEL,
    jwt: {
      secret: jwtSecret ?? randomBytes(32).toString('base64url'),
      secretGenerated: jwtSecret === undefined,
      verifySecrets: env.JWT_VERIFY_SECRETS === undefined ? [] : secrets(env.JWT_VERIFY_SECRETS, 'JWT_VERIFY_SECRETS'),
      accessTokenTtlSeconds: env.ACCESS_TOKEN_TTL_SECONDS,
      issuer: 'items-service',
      audience: 'items-service'
    },
    refreshTokenTtlSeconds: env.REFRESH_TOKEN_TTL_SECONDS,
    refreshReuseLeewaySeconds: env.REFRESH_REUSE_LEEWAY_SECONDS,
    maxSessionsPerUser: env.MAX_SESSIONS_PER_USER,
    sessionSweepIntervalMs: env.SESSION_SWEEP_INTERVAL_MS,
    passwordQueueLimit: env.PASSWORD_QUEUE_LIMIT,
    passwordHashCost,
    bodyLimit: env.BODY_LIMIT_BYTES,
    requestTimeoutMs: env.REQUEST_TIMEOUT_MS,
    rateLimits: env.RATE_LIMIT === 'off'
      ? null
      : {
          login: rateLimit(env.RATE_LIMIT_LOGIN),
          loginAddress: rateLimit(env.RATE_LIMIT_LOGIN_ADDRESS),
          loginFailures: rateLimit(env.RATE_LIMIT_LOGIN_FAILURES, env.RATE_LIMIT_LOGIN_FAILURES_WINDOW_SECONDS),
          register: rateLimit(env.RATE_LIMIT_REGISTER),
          refresh: rateLimit(env.RATE_LIMIT_REFRESH),
          writes: rateLimit(env.RATE_LIMIT_WRITES),
          registrations: registrationsLimit(env.MAX_ACCOUNTS)
        },
    store: {
      kind: env.STORE,
      redisUrl: redisUrl(env.REDIS_URL, 'REDIS_URL'),
      redisSentinel: sentinelsListed === ''
        ? undefined
        : { sentinels: sentinels(sentinelsListed, 'REDIS_SENTINELS'), name: env.REDIS_SENTINEL_NAME, password: env.REDIS_SENTINEL_PASSWORD },
      redisReplicasToAcknowledge: env.REDIS_REPLICAS_TO_ACKNOWLEDGE ?? (sentinelsListed === '' ? 0 : 1),
      redisKeyPrefix: env.REDIS_KEY_PREFIX,
      maxItemsPerUser: env.MAX_ITEMS_PER_USER,
      idempotencyKeys: { ttlMs: env.IDEMPOTENCY_KEY_TTL_SECONDS * 1000, perUser: env.MAX_IDEMPOTENCY_KEYS_PER_USER },
      accounts: { accounts: env.MAX_ACCOUNTS, quotaBytes: env.ACCOUNT_QUOTA_KIB * 1024 }
    },
    webhooks: {
      subscriptions: env.WEBHOOKS !== undefined
        ? subscriptions(env.WEBHOOKS, 'WEBHOOKS')
        : env.WEBHOOKS_FILE === undefined ? [] : subscriptionsFile(env.WEBHOOKS_FILE, 'WEBHOOKS_FILE'),
      timeoutMs: env.WEBHOOK_TIMEOUT_MS,
      retryDelaysMs: delays(env.WEBHOOK_RETRY_DELAYS_MS, 'WEBHOOK_RETRY_DELAYS_MS'),
      reclaimAfterMs: env.WEBHOOK_RECLAIM_AFTER_MS
    },
    seedFile,
    corsOrigins: env.CORS_ORIGINS === undefined ? [] : origins(env.CORS_ORIGINS, 'CORS_ORIGINS'),
    trustProxy,
    clientIpv6PrefixLength: env.CLIENT_IPV6_PREFIX_LENGTH,
    shutdownTimeoutMs: env.SHUTDOWN_TIMEOUT_MS,
    maxEventLoopDelayMs: env.MAX_EVENT_LOOP_DELAY_MS,
    maxHeapUsedBytes,
    strictResponses,
    warnings
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
 * by part; lists and other values are replaced whole. A part that is off by default (the operations API, tracing,
 * sandboxes)
 * and that the settings turn on keeps the defaults it has when on for what they leave out.
 */
export function withDefaults (settings: AppSettings = {}): AppConfig {
  const defaults = loadConfig({})
  const turnedOn = (part: 'operations' | 'tracing' | 'sandboxes'): boolean => settings[part] !== undefined
  const on = turnedOn('operations') || turnedOn('tracing') || turnedOn('sandboxes')
    ? loadConfig({ OPS_PORT: '0', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1', SANDBOXES: 'on' })
    : defaults
  const config = merged<AppConfig>({
    ...defaults,
    operations: turnedOn('operations') ? on.operations : defaults.operations,
    tracing: turnedOn('tracing') ? on.tracing : defaults.tracing,
    sandboxes: turnedOn('sandboxes') ? on.sandboxes : defaults.sandboxes
  }, settings)
  // A secret that was given was not generated, unless the settings say so (a whole configuration from loadConfig).
  const secretGenerated = settings.jwt?.secretGenerated ?? settings.jwt?.secret === undefined
  return { ...config, jwt: { ...config.jwt, secretGenerated } }
}
