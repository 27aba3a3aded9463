// What the rate limits leave in the store: keys an operator can read and list.
import { Redis } from 'ioredis'
import t from 'tap'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { newUser } from '../support/api.js'
import { build } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

t.test('every rate-limit key is one line of printable ASCII: the email in a sign-in\'s key is percent-encoded after a "|"', { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const api = await build(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix, RATE_LIMIT: 'on' })
  const body = newUser({ email: 'Ada.Lovelace+tag@Example.com' })
  await api.call('registerUser', { body })
  t.equal((await api.call('loginUser', { body: { email: body.email, password: 'not the password' } })).statusCode, 401)
  const raw = new Redis(REDIS_URL)
  t.teardown(() => { raw.disconnect() })
  const keys = (await raw.keys(`${prefix}rate-limit:*`)).map((key) => key.slice(prefix.length)).sort()
  const email = encodeURIComponent('ada.lovelace+tag@example.com')
  t.same(keys, ['rate-limit:login-address:127.0.0.1', `rate-limit:login-failures:${email}`, `rate-limit:login:127.0.0.1|${email}`, 'rate-limit:register:127.0.0.1'])
  t.ok(keys.every((key) => /^[\x21-\x7e]+$/.test(key)), 'each one line, of printable ASCII')
})
