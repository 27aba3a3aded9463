// What the rate limits leave in the store: keys an operator can read and list.
import { createHash } from 'node:crypto'
import { Redis } from 'ioredis'
import t from 'tap'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { newUser } from '../support/api.js'
import { build } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

t.test('every rate-limit key is one line of printable ASCII, of a size no email changes: a sign-in\'s email is keyed by its digest', { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix, RATE_LIMIT: 'on' })
  const body = newUser({ email: 'Ada.Lovelace+tag@Example.com' })
  await api.call('registerUser', { body })
  t.equal((await api.call('loginUser', { body: { email: body.email, password: 'not the password' } })).statusCode, 401)
  // The longest email the contract allows, unknown: counted as any other.
  const longest = `${'x'.repeat(64)}@${'y'.repeat(63)}.${'z'.repeat(63)}.${'w'.repeat(53)}.example`
  t.equal((await api.call('loginUser', { body: { email: longest, password: 'not the password' } })).statusCode, 401)
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const keys = (await raw.keys(`${prefix}rate-limit:*`)).map((key) => key.slice(prefix.length)).sort()
  const digest = (email: string): string => createHash('sha256').update(email).digest('base64url')
  const [known, unknown] = [digest('ada.lovelace+tag@example.com'), digest(longest)]
  t.same(keys, [
    'rate-limit:login-address:127.0.0.1',
    ...[`rate-limit:login-failures:${known}`, `rate-limit:login-failures:${unknown}`].sort(),
    ...[`rate-limit:login:127.0.0.1|${known}`, `rate-limit:login:127.0.0.1|${unknown}`].sort(),
    'rate-limit:register:127.0.0.1',
    'rate-limit:registrations:service'
  ])
  t.ok(keys.every((key) => /^[\x21-\x7e]+$/.test(key) && key.length <= 'rate-limit:login:'.length + 39 + 1 + 43), 'each one line of printable ASCII, no longer than an address and a digest')
})
