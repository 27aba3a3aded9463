// Every environment variable the service reads, said once: its type, default, bounds and meaning. loadConfig
// validates the environment against this schema (with Ajv), the Environment type is derived from it, and the
// configuration table (docs/configuration.md) is written from it (npm run docs:config; a test checks the page is current).
// A duration or a size says its unit in its name; `replaces` is the name it had before, still read, with a warning.
import { OWASP_HASH_COST } from '../auth/hash-cost.js'
import { IDEMPOTENCY_KEY_DEFAULTS } from '../domain/bounds.js'

interface Variable {
  readonly description: string
  /** The name this variable had before; read when the new one is unset, with a one-line deprecation warning. */
  readonly replaces?: string
  /** How docs/configuration.md shows a default that is not a plain value (one derived at run time). */
  readonly defaultShown?: string
}

interface IntegerVariable extends Variable {
  readonly type: 'integer'
  readonly minimum: number
  readonly maximum?: number
  readonly default?: number
}

interface ChoiceVariable extends Variable {
  readonly type: 'string'
  readonly enum: readonly string[]
  readonly default: string
}

/** Text; one without `minLength` has a reader of its own in config.ts that checks it. */
interface TextVariable extends Variable {
  readonly type: 'string'
  readonly minLength?: number
  readonly default?: string
}

export type VariableSchema = IntegerVariable | ChoiceVariable | TextVariable

const ENVIRONMENTS = ['development', 'test', 'production'] as const
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

export const variables = {
  NODE_ENV: { type: 'string', enum: ENVIRONMENTS, default: 'development', description: 'Production requires `JWT_SECRET`, and so does `STORE=redis`.' },
  HOST: { type: 'string', minLength: 1, default: '127.0.0.1', description: 'Address to listen on (`0.0.0.0` for all interfaces).' },
  PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000, description: 'Port to listen on (`0` picks a free one).' },
  OPS_PORT: {
    type: 'integer',
    minimum: 0,
    maximum: 65535,
    description: 'Port of the operations API (`GET /metrics`, dead letters; ops/openapi.yaml), on `OPS_HOST`, never `PORT`; unset, it is off (`0` picks a free one).'
  },
  OPS_HOST: {
    type: 'string',
    minLength: 1,
    default: '127.0.0.1',
    description: 'Address the operations API listens on: loopback by default, whatever `HOST` is. Any other address needs `OPS_TOKEN` when `NODE_ENV=production` (a warning otherwise).'
  },
  OPS_TOKEN: { type: 'string', minLength: 16, description: 'When set, the operations API requires it as a bearer token; unset, whoever reaches `OPS_PORT` may read it.' },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    type: 'string',
    minLength: 1,
    description: 'Where traces go over OTLP/HTTP (`/v1/traces` appended), e.g. `http://127.0.0.1:4318`; unset, and `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` too, tracing is off and none of it is loaded. The SDK reads the other standard `OTEL_*` variables itself (docs/operations.md).'
  },
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: { type: 'string', minLength: 1, description: 'The traces URL itself, instead of `OTEL_EXPORTER_OTLP_ENDPOINT`.' },
  OTEL_EXPORTER_OTLP_PROTOCOL: { type: 'string', enum: ['http/protobuf', 'http/json'], default: 'http/protobuf', description: 'How spans are sent (`grpc` is not offered).' },
  OTEL_SERVICE_NAME: { type: 'string', minLength: 1, default: 'items-service', description: 'The service\'s name on its spans.' },
  LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info', description: 'The lowest level logged.' },
  JWT_SECRET: {
    type: 'string',
    minLength: 32,
    defaultShown: 'random per process',
    description: 'HS256 signing secret, at least 32 characters. When unset outside production a random one is made and a warning logged: tokens then do not survive a restart.'
  },
  JWT_VERIFY_SECRETS: {
    type: 'string',
    description: 'Secrets that verify access tokens beside `JWT_SECRET` and never sign, comma-separated, each at least 32 characters: a rotation\'s next secret before the instances sign with it, then its previous one until the tokens it signed have lapsed (`ACCESS_TOKEN_TTL_SECONDS`; docs/operations.md, "Rotating JWT_SECRET").'
  },
  ACCESS_TOKEN_TTL_SECONDS: { type: 'integer', minimum: 1, default: 900, replaces: 'ACCESS_TOKEN_TTL', description: 'Access token lifetime (reported as `expiresIn`).' },
  REFRESH_TOKEN_TTL_SECONDS: { type: 'integer', minimum: 1, default: 604800, replaces: 'REFRESH_TOKEN_TTL', description: 'Absolute session lifetime (7 days); refreshing does not extend it.' },
  REFRESH_REUSE_LEEWAY_SECONDS: {
    type: 'integer',
    minimum: 0,
    maximum: 60,
    default: 5,
    replaces: 'REFRESH_REUSE_LEEWAY',
    description: 'How long a just-replaced refresh token is accepted again, so a retry after a lost response or a second tab does not end the session; `0` makes every replay end it (docs/security.md).'
  },
  MAX_SESSIONS_PER_USER: { type: 'integer', minimum: 1, default: 20, description: 'Live sessions (sign-ins) a user may have; one more ends the oldest.' },
  PASSWORD_QUEUE_LIMIT: {
    type: 'integer',
    minimum: 1,
    default: 128,
    description: 'Sign-ins and registrations that may wait for a password hash, from any client while there is room; a full queue refuses (503, `Retry-After: 1`) from the client holding the most places (docs/security.md).'
  },
  PASSWORD_HASH_MEMORY_KIB: {
    type: 'integer',
    minimum: 8,
    maximum: 1048576,
    default: OWASP_HASH_COST.memoryKib,
    description: 'Memory an argon2id hash of a new password takes (KiB); stored hashes keep the cost they were made with. Less than the default (OWASP\'s minimum) is refused when `NODE_ENV=production`: a cheaper hash is for tests.'
  },
  PASSWORD_HASH_PASSES: { type: 'integer', minimum: 1, maximum: 16, default: OWASP_HASH_COST.passes, description: 'Passes of an argon2id hash over its memory (its time cost); fewer than the default is refused when `NODE_ENV=production`.' },
  SESSION_SWEEP_INTERVAL_MS: { type: 'integer', minimum: 10, default: 60000, replaces: 'SESSION_SWEEP_INTERVAL', description: 'Time between sweeps that forget ended sessions (at most 10 000 a sweep).' },
  BODY_LIMIT_BYTES: { type: 'integer', minimum: 1024, default: 65536, replaces: 'BODY_LIMIT', description: 'Largest accepted request body; larger is a 413.' },
  REQUEST_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1000,
    default: 30000,
    replaces: 'REQUEST_TIMEOUT',
    description: 'How long a request\'s headers and body together may take to arrive (on `OPS_PORT` too); a slower client gets 408 and its connection closed, at most one second later than this.'
  },
  SANDBOXES: {
    type: 'string',
    enum: ['on', 'off'],
    default: 'off',
    description: '`on` serves sandboxes: isolated catalogues, each created on the operations API (`POST /sandboxes`, so `OPS_PORT` is required) and served under `/sandboxes/{sandboxId}` on `PORT` (docs/testing.md, "Sandboxes"): on Redis, kept for every instance under key prefixes of their own.'
  },
  SANDBOX_LIMIT: { type: 'integer', minimum: 1, maximum: 10000, default: 100, description: 'Sandboxes that may exist at once; one more is 507 `STORE_FULL` until one is deleted or idles out.' },
  SANDBOX_IDLE_SECONDS: { type: 'integer', minimum: 1, default: 3600, description: 'A sandbox no request has used for this long is deleted, with everything it keeps.' },
  SANDBOX_ACCOUNTS: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    default: 10,
    description: 'Accounts each sandbox admits (its own `MAX_ACCOUNTS`), each within `ACCOUNT_QUOTA_KIB`; one more is 507 `STORE_FULL`, and fixtures with more users are refused (400).'
  },
  RATE_LIMIT: { type: 'string', enum: ['on', 'off'], default: 'on', description: '`off` switches every rate limit off, the service-wide limit on registrations too (for test rigs that register hundreds of accounts a minute).' },
  RATE_LIMIT_WINDOW_SECONDS: { type: 'integer', minimum: 1, default: 60, replaces: 'RATE_LIMIT_WINDOW', description: 'Window of every rate limit but the account limit.' },
  RATE_LIMIT_LOGIN: { type: 'integer', minimum: 1, default: 10, description: 'Sign-in attempts per window per client address and email.' },
  RATE_LIMIT_LOGIN_ADDRESS: { type: 'integer', minimum: 1, default: 60, description: 'Sign-in attempts per window per client address, whatever the email; checked before the body is read.' },
  RATE_LIMIT_LOGIN_FAILURES: {
    type: 'integer',
    minimum: 1,
    default: 10,
    description: 'Failed sign-ins of one account, from any address, before its sign-ins are 429 (the right password too) until the window ends; a success clears the count.'
  },
  RATE_LIMIT_LOGIN_FAILURES_WINDOW_SECONDS: { type: 'integer', minimum: 1, default: 900, description: 'Window of the account limit.' },
  RATE_LIMIT_REGISTER: { type: 'integer', minimum: 1, default: 20, description: 'Registrations per window per client address.' },
  RATE_LIMIT_REFRESH: { type: 'integer', minimum: 1, default: 60, description: 'Refreshes per window per client address.' },
  RATE_LIMIT_WRITES: { type: 'integer', minimum: 1, default: 60, description: 'Item creates, edits and deletes together per window per user.' },
  STORE: {
    type: 'string',
    enum: ['memory', 'redis'],
    default: 'memory',
    description: '`memory` keeps everything in this process, lost when it ends; `redis` keeps it in Redis, shared by every instance (docs/redis.md).'
  },
  REDIS_URL: {
    type: 'string',
    default: 'redis://127.0.0.1:6379',
    description: 'With `STORE=redis`: the server, as a `redis://` or `rediss://` (TLS) URL, with user, password and database number if needed.'
  },
  REDIS_SENTINELS: {
    type: 'string',
    description: 'With `STORE=redis`: the Sentinel deployment\'s sentinels, `host:port` comma-separated. Every connection then follows the primary they name (`REDIS_SENTINEL_NAME`) through failovers, without a restart; `REDIS_URL` gives only the user, password, database and TLS (`rediss://`, for the sentinels too), not the host (docs/redis.md, "High availability").'
  },
  REDIS_SENTINEL_NAME: { type: 'string', minLength: 1, default: 'mymaster', description: 'With `REDIS_SENTINELS`: the name the sentinels monitor the primary under.' },
  REDIS_SENTINEL_PASSWORD: { type: 'string', description: 'With `REDIS_SENTINELS`: the sentinels\' own password, when they ask for one.' },
  REDIS_REPLICAS_TO_ACKNOWLEDGE: {
    type: 'integer',
    minimum: 0,
    defaultShown: '1 with `REDIS_SENTINELS`, else 0',
    description: 'Replicas that must have a write (`WAIT`) before it is answered 2xx; one they have not within 500 ms is answered 504 `OUTCOME_UNKNOWN` (retriable under its `Idempotency-Key`) and the next 503 until enough replicas catch up, so that no answered write is lost at a failover.'
  },
  REDIS_KEY_PREFIX: { type: 'string', minLength: 1, default: 'items-service:', description: 'With `STORE=redis`: starts every key the service writes, so several deployments share one server.' },
  TRUST_PROXY: {
    type: 'string',
    default: 'false',
    description: 'The proxies\' addresses and CIDR ranges, comma-separated, whose `X-Forwarded-For` gives the client address that rate limits key on (the rightmost entry not a trusted proxy). `true` or a hop count lets any client choose its address, so they stop the start unless `TRUST_PROXY_UNSAFE=1`.'
  },
  TRUST_PROXY_UNSAFE: { type: 'string', enum: ['0', '1'], default: '0', description: '`1` accepts `TRUST_PROXY=true` or a hop count: only where no client reaches the service but through its proxies.' },
  CLIENT_IPV6_PREFIX_LENGTH: {
    type: 'integer',
    minimum: 1,
    maximum: 128,
    default: 64,
    description: 'Bits of an IPv6 client address that make one client for rate limits and the hashing queue (an IPv4-mapped address counts as its IPv4 one).'
  },
  MAX_ITEMS_PER_USER: { type: 'integer', minimum: 1, default: 1000, description: 'Items one contributor may own at once; one more is 403 `ITEM_QUOTA_EXCEEDED`.' },
  IDEMPOTENCY_KEY_TTL_SECONDS: {
    type: 'integer',
    minimum: 1,
    default: IDEMPOTENCY_KEY_DEFAULTS.ttlMs / 1000,
    description: 'How long a create made with an `Idempotency-Key` is remembered, for a retry with that key to get its response again (a day).'
  },
  MAX_IDEMPOTENCY_KEYS_PER_USER: {
    type: 'integer',
    minimum: 1,
    default: IDEMPOTENCY_KEY_DEFAULTS.perUser,
    description: 'Idempotency keys remembered per user; one more forgets their oldest (and so does a write that would pass the user\'s quota: `ACCOUNT_QUOTA_KIB`).'
  },
  MAX_ACCOUNTS: {
    type: 'integer',
    minimum: 1,
    default: 1000,
    description: 'Accounts the service admits; one more registration is 507 `STORE_FULL`. Registrations to the whole service are limited to a 25th of them an hour (`registrations`, while `RATE_LIMIT=on`), so that no flood fills them in less than a day. With `ACCOUNT_QUOTA_KIB`, it sizes the store: the start checks that every account\'s worst case fits (docs/capacity.md).'
  },
  ACCOUNT_QUOTA_KIB: {
    type: 'integer',
    minimum: 64,
    maximum: 1048576,
    default: 128,
    description: 'What each account keeps at most: the UTF-8 bytes of its items\' texts and of its idempotency records\'. A create or an edit past it forgets the account\'s own oldest records first, then is 403 `ACCOUNT_QUOTA_EXCEEDED`.'
  },
  WEBHOOKS: {
    type: 'string',
    description: 'The webhook subscribers, as JSON: `[{"url": "https://…", "secret": "whsec_<base64 of 24 to 64 bytes>", "channels": ["items.item.added", …]}]`, at most 16; `channels` left out means all three. Every instance on one Redis must have the same list. Secrets are never logged (docs/webhooks.md).'
  },
  WEBHOOKS_FILE: { type: 'string', description: 'A file holding the same JSON, instead of `WEBHOOKS` (not both).' },
  WEBHOOK_TIMEOUT_MS: {
    type: 'integer',
    minimum: 100,
    maximum: 600000,
    default: 10000,
    description: 'How long one delivery attempt may take in all: connecting, sending, the response\'s status and body; past it, an attempt with no 2xx status has failed.'
  },
  WEBHOOK_RETRY_DELAYS_MS: {
    type: 'string',
    default: '5000,300000,1800000,7200000,18000000,36000000,36000000',
    description: 'The waits before each retry, comma-separated (each ±10 % at random); a delivery is given up after one attempt more than there are waits. The default is Standard Webhooks\' schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.'
  },
  WEBHOOK_RECLAIM_AFTER_MS: {
    type: 'integer',
    minimum: 1000,
    default: 60000,
    description: 'With `STORE=redis`: how long a delivery taken by one instance may stay unsettled (its instance died mid-attempt) before another takes it over. Longer than `WEBHOOK_TIMEOUT_MS`.'
  },
  CORS_ORIGINS: {
    type: 'string',
    description: 'Browser origins allowed to call the API, comma-separated, as a browser sends them (`http://localhost:5173,https://app.example.com`). Unset, CORS is off and a preflight is a 404.'
  },
  SEED_FILE: { type: 'string', minLength: 1, description: 'A JSON file of users and items loaded before the server is ready (docs/testing.md, "Fixtures for integration tests"). Refused when `NODE_ENV=production`.' },
  SHUTDOWN_TIMEOUT_MS: {
    type: 'integer',
    minimum: 1,
    default: 10000,
    replaces: 'SHUTDOWN_TIMEOUT',
    description: 'How long a graceful shutdown may take. Connections still open at 80 % of it are closed; past all of it (a stuck event handler) the process exits anyway, with code 1.'
  },
  CONTRACT_STRICT_RESPONSES: {
    type: 'string',
    enum: ['0', '1'],
    default: '0',
    description: '`1` makes the service check each of its responses against the contract and answer a logged 500 instead of one that breaks it. For development and test; refused in production.'
  },
  MAX_HEAP_USED_MIB: {
    type: 'integer',
    minimum: 16,
    replaces: 'MAX_HEAP_USED',
    defaultShown: '60 % of V8\'s heap limit',
    description: 'Heap in use past which every request but a `GET`, an item delete and a logout is shed (503). With a small `--max-old-space-size`, set it (docs/operations.md).'
  },
  MAX_EVENT_LOOP_DELAY_MS: {
    type: 'integer',
    minimum: 0,
    default: 1000,
    replaces: 'MAX_EVENT_LOOP_DELAY',
    description: 'Shed requests (but item deletes and logouts) with 503 while the mean event-loop delay exceeds this; `0` never sheds for delay.'
  }
} as const satisfies Record<string, VariableSchema>

/** Variables the service no longer reads, each with what took its place: set, a start warns. */
export const removedVariables: Readonly<Record<string, string>> = Object.fromEntries([
  ...['STORE_CAPACITY_MIB', 'ACCOUNT_FLOORS_PERCENT', 'ACCOUNT_FLOOR_KIB', 'ACCOUNT_SESSIONS_KIB', 'ACCOUNT_CEILING_MIB'].map((name) =>
    [name, 'MAX_ACCOUNTS and ACCOUNT_QUOTA_KIB bound what the store keeps for accounts']),
  ['REGISTRATION_ROOM_SECONDS', 'registrations are limited to a 25th of MAX_ACCOUNTS an hour'],
  ['SANDBOX_CAPACITY_KIB', 'SANDBOX_ACCOUNTS, each within ACCOUNT_QUOTA_KIB']
])

export type VariableName = keyof typeof variables
type ValueOf<V> = V extends { readonly enum: ReadonlyArray<infer Choice> } ? Choice : V extends { readonly type: 'integer' } ? number : string

/** The environment as the schema reads it: a variable with a default always has a value. */
export type Environment = {
  readonly [Name in VariableName]: (typeof variables)[Name] extends { readonly default: unknown }
    ? ValueOf<(typeof variables)[Name]>
    : ValueOf<(typeof variables)[Name]> | undefined
}

/** The JSON Schema the environment is validated with: each variable's type, bounds and default. */
export const environmentSchema = {
  type: 'object',
  properties: Object.fromEntries(Object.entries<VariableSchema>(variables).map(([name, variable]) => {
    const { description: _description, replaces: _replaces, defaultShown: _defaultShown, ...schema } = variable
    return [name, schema]
  }))
}

/** What a value of `name` must be, said of it as it was set (`setAs`: its name, or the name it replaces). */
export function invalidValue (name: VariableName, setAs: string, raw: string): string {
  const variable: VariableSchema = variables[name]
  const got = `, got "${raw}"`
  if ('enum' in variable) return `${setAs} must be one of ${variable.enum.join(', ')}${got}`
  if (variable.type === 'integer') return `${setAs} must be an integer from ${variable.minimum} to ${variable.maximum ?? Number.MAX_SAFE_INTEGER}${got}`
  return `${setAs} must be at least ${String(variable.minLength)} characters long`
}

/** docs/configuration.md's table, row by row from the schema. */
export function configurationTable (): string {
  const rows = Object.entries<VariableSchema>(variables).map(([name, variable]) => {
    const shown = variable.defaultShown ?? ('default' in variable && variable.default !== undefined ? `\`${variable.default}\`` : 'none')
    const was = variable.replaces === undefined ? '' : ` (was \`${variable.replaces}\`, still read, with a warning)`
    return `| \`${name}\` | ${shown} | ${variable.description}${was} |`
  })
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n')
}
