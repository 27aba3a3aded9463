import { randomBytes } from 'node:crypto'
import envSchema from 'env-schema'

// Every setting the service reads from the environment. README.md documents each one in the same order.
const environmentSchema = {
  type: 'object',
  properties: {
    NODE_ENV: { type: 'string', enum: ['development', 'test', 'production'], default: 'development' },
    HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000 },
    LOG_LEVEL: { type: 'string', enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info' },
    JWT_SECRET: { type: 'string', minLength: 32 },
    ACCESS_TOKEN_TTL: { type: 'integer', minimum: 1, default: 900 },
    REFRESH_TOKEN_TTL: { type: 'integer', minimum: 1, default: 604800 },
    BODY_LIMIT: { type: 'integer', minimum: 1024, default: 65536 },
    RATE_LIMIT: { type: 'string', enum: ['on', 'off'], default: 'on' },
    RATE_LIMIT_WINDOW: { type: 'integer', minimum: 1, default: 60 },
    RATE_LIMIT_LOGIN: { type: 'integer', minimum: 1, default: 10 },
    RATE_LIMIT_REGISTER: { type: 'integer', minimum: 1, default: 20 },
    RATE_LIMIT_REFRESH: { type: 'integer', minimum: 1, default: 60 },
    SHUTDOWN_TIMEOUT: { type: 'integer', minimum: 1, default: 10000 }
  },
  required: []
} as const

interface Environment {
  NODE_ENV: 'development' | 'test' | 'production'
  HOST: string
  PORT: number
  LOG_LEVEL: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'
  JWT_SECRET?: string
  ACCESS_TOKEN_TTL: number
  REFRESH_TOKEN_TTL: number
  BODY_LIMIT: number
  RATE_LIMIT: 'on' | 'off'
  RATE_LIMIT_WINDOW: number
  RATE_LIMIT_LOGIN: number
  RATE_LIMIT_REGISTER: number
  RATE_LIMIT_REFRESH: number
  SHUTDOWN_TIMEOUT: number
}

export interface RateLimit {
  max: number
  windowSeconds: number
}

export interface AppConfig {
  environment: Environment['NODE_ENV']
  host: string
  port: number
  logLevel: Environment['LOG_LEVEL']
  jwt: {
    secret: string
    /** True when no JWT_SECRET was given and a random one was made for this process. */
    secretGenerated: boolean
    accessTokenTtlSeconds: number
    issuer: string
    audience: string
  }
  refreshTokenTtlSeconds: number
  bodyLimit: number
  rateLimits: { login: RateLimit, register: RateLimit, refresh: RateLimit } | null
  shutdownTimeoutMs: number
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

/** Reads and validates the configuration; throws a ConfigError naming the variable when a value is bad. */
export function loadConfig (source: NodeJS.ProcessEnv = process.env): AppConfig {
  let env: Environment
  try {
    env = envSchema<Environment>({ schema: environmentSchema, data: source, dotenv: false })
  } catch (error) {
    throw new ConfigError(`Invalid configuration: ${(error as Error).message.replace(/env\//g, '')}`)
  }
  if (env.NODE_ENV === 'production' && env.JWT_SECRET === undefined) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when NODE_ENV is production')
  }
  const windowSeconds = env.RATE_LIMIT_WINDOW
  return {
    environment: env.NODE_ENV,
    host: env.HOST,
    port: env.PORT,
    logLevel: env.LOG_LEVEL,
    jwt: {
      secret: env.JWT_SECRET ?? randomBytes(32).toString('base64url'),
      secretGenerated: env.JWT_SECRET === undefined,
      accessTokenTtlSeconds: env.ACCESS_TOKEN_TTL,
      issuer: 'items-service',
      audience: 'items-service'
    },
    refreshTokenTtlSeconds: env.REFRESH_TOKEN_TTL,
    bodyLimit: env.BODY_LIMIT,
    rateLimits: env.RATE_LIMIT === 'off'
      ? null
      : {
          login: { max: env.RATE_LIMIT_LOGIN, windowSeconds },
          register: { max: env.RATE_LIMIT_REGISTER, windowSeconds },
          refresh: { max: env.RATE_LIMIT_REFRESH, windowSeconds }
        },
    shutdownTimeoutMs: env.SHUTDOWN_TIMEOUT
  }
}
