// What both benchmarks need of the service: how it is configured, and a JSON call to it.

export const JWT_SECRET = 'a-benchmark-secret-that-is-at-least-32-bytes'

// Production defaults but for these: a known secret, no log line per request (at the default `info`, two JSON
// lines per request go to standard output), and limits the benchmarks cannot reach, though every limit is still
// counted (the sign-in scenarios all come from one address, the write scenarios make one user's items by the ten
// thousand, and the login storm signs in the user whose session the list uses).
const UNREACHABLE = '1000000000'
export const serviceEnv = {
  JWT_SECRET,
  LOG_LEVEL: 'warn',
  // A day: under callgrind on a busy machine a run outlasts the default 15 minutes, and every request after that
  // would be a 401. A token of any lifetime has the same length, and costs the same to check.
  ACCESS_TOKEN_TTL_SECONDS: '86400',
  RATE_LIMIT_LOGIN: UNREACHABLE,
  RATE_LIMIT_LOGIN_ADDRESS: UNREACHABLE,
  RATE_LIMIT_REGISTER: UNREACHABLE,
  RATE_LIMIT_WRITES: UNREACHABLE,
  PASSWORD_QUEUE_LIMIT: '1000',
  MAX_ITEMS_PER_USER: UNREACHABLE,
  MAX_SESSIONS_PER_USER: UNREACHABLE,
  // One account makes every item of a run: its quota holds them all (their bytes are counted all the same).
  ACCOUNT_QUOTA_KIB: '1048576'
}

/** A JSON request to the service; throws on any status but 2xx. */
export async function call (url: string, method: string, body?: unknown, token?: string): Promise<any> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (token !== undefined) headers.authorization = `Bearer ${token}`
  const response = await fetch(url, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
  if (!response.ok) throw new Error(`${method} ${url}: ${response.status} ${await response.text()}`)
  return await response.json()
}
