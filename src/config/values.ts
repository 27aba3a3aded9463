// How the configuration's text values are read: each reader takes a variable's value and its name, for the error.
import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import type { RedisSentinel } from '../store/redis/connection.js'
import { parseSubscriptions, type Subscription } from '../webhooks/subscriptions.js'

export class ConfigError extends Error {
  override name = 'ConfigError'
}

type Reader<T> = (raw: string, name: string) => T

export const redisUrl: Reader<string> = (raw, name) => {
  if (!/^rediss?:\/\/./.test(raw) || !URL.canParse(raw)) {
    throw new ConfigError(`Invalid configuration: ${name} must be a redis:// or rediss:// URL`)
  }
  return raw
}

export const sentinels: Reader<RedisSentinel['sentinels']> = (raw, name) => raw.split(',').map((entry) => {
  const address = entry.trim()
  const [, host = '', port = '0'] = /^(\[[0-9a-fA-F:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(address) ?? []
  if (host === '' || Number(port) < 1 || Number(port) > 65535) {
    throw new ConfigError(`Invalid configuration: ${name} must be comma-separated host:port pairs, got "${address}"`)
  }
  return { host: host.replace(/^\[(.*)\]$/, '$1'), port: Number(port) }
})

// What Fastify's trustProxy (proxy-addr) takes in a list: an address, a CIDR range, or a named range.
const NAMED_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal'])
function isProxyAddress (entry: string): boolean {
  const [address = '', bits, ...rest] = entry.split('/')
  const version = isIP(address)
  if (bits === undefined) return NAMED_RANGES.has(entry) || version !== 0
  return rest.length === 0 && version !== 0 && /^\d{1,3}$/.test(bits) && Number(bits) <= (version === 4 ? 32 : 128)
}

export type TrustedProxies = boolean | string | ((address: string, hop: number) => boolean)

// `false`, the proxies' addresses and CIDR ranges, comma-separated, or (see TRUST_PROXY_UNSAFE) `true` or a number
// of proxy hops to trust.
export const proxies: Reader<TrustedProxies> = (raw, name) => {
  if (raw === 'true' || raw === 'false') return raw === 'true'
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw)
    return (_address, hop) => hop < hops
  }
  const addresses = raw.split(',').map((address) => address.trim())
  if (addresses.every(isProxyAddress)) return addresses.join(',')
  throw new ConfigError(`Invalid configuration: ${name} must be true, false, a number of hops, or comma-separated addresses, got "${raw}"`)
}

export const subscriptions: Reader<Subscription[]> = (raw, name) => {
  try {
    return parseSubscriptions(raw)
  } catch (error) {
    throw new ConfigError(`Invalid configuration: ${name}${(error as Error).message}`)
  }
}

export const subscriptionsFile: Reader<Subscription[]> = (path, name) => {
  let json: string
  try {
    json = readFileSync(path, 'utf8')
  } catch (error) {
    throw new ConfigError(`Invalid configuration: ${name} cannot be read: ${(error as Error).message}`)
  }
  return subscriptions(json, `${name} (${path})`)
}

// Browser origins, comma-separated, each as a browser sends it in `Origin`: scheme, host and port if not the default.
export const origins: Reader<string[]> = (raw, name) => {
  const listed = raw.split(',').map((origin) => origin.trim())
  const invalid = listed.find((origin) => !URL.canParse(origin) || new URL(origin).origin !== origin)
  if (invalid === undefined) return listed
  throw new ConfigError(`Invalid configuration: ${name} must be comma-separated origins such as http://localhost:5173, got "${invalid}"`)
}

// Milliseconds to wait before each retry, comma-separated: one attempt more than there are delays.
export const delays: Reader<number[]> = (raw, name) => {
  const values = raw.split(',').map((value) => value.trim())
  if (values.length > 0 && values.every((value) => /^\d{1,9}$/.test(value))) return values.map(Number)
  throw new ConfigError(`Invalid configuration: ${name} must be comma-separated whole milliseconds, got "${raw}"`)
}

// Signing secrets, comma-separated: each as long as JWT_SECRET must be.
export const secrets: Reader<string[]> = (raw, name) => {
  const listed = raw.split(',').map((secret) => secret.trim())
  if (listed.every((secret) => secret.length >= 32)) return listed
  throw new ConfigError(`Invalid configuration: ${name} must be comma-separated secrets of at least 32 characters each`)
}
