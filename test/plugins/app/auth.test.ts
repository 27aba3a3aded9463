// A JWT_SECRET rotated as docs/operations.md says, on two instances sharing one catalogue on Redis, one instance
// restarted after the other at each step: no access token any instance signed is refused by another meanwhile.
import t from 'tap'
import { type Api, newUser } from '../../support/api.js'
import { build } from '../../support/app.js'
import { redisKeyPrefix, redisSkip } from '../../support/redis.js'
import { decodeClaims, forgeToken } from '../../support/tokens.js'

const OLD = 'the-secret-every-instance-signs-with-today'
const NEW = 'the-secret-every-instance-will-sign-with-next'

t.test('a secret rotated on two instances on Redis, one after the other, signs out no one', { skip: await redisSkip() }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  const instance = async (JWT_SECRET: string, JWT_VERIFY_SECRETS?: string): Promise<Api> =>
    await build(t, { ...shared, JWT_SECRET, ...(JWT_VERIFY_SECRETS === undefined ? {} : { JWT_VERIFY_SECRETS }) })
  const user = newUser()
  let [one, other] = [await instance(OLD), await instance(OLD)]
  const signedOld = (await one.call('registerUser', { body: user })).json().accessToken as string
  const signIn = async (api: Api): Promise<{ accessToken: string, refreshToken: string }> => (await api.call('loginUser', { body: { email: user.email, password: user.password } })).json()
  const served = async (token: string): Promise<number[]> => await Promise.all([one, other].map(async (api) => (await api.call('listItems', { token })).statusCode))

  // Step 1: each instance in turn learns to verify the new secret, still signing with the old one.
  one = await instance(OLD, NEW)
  t.same(await served(signedOld), [200, 200], 'step 1, one instance restarted: the old secret\'s token is served by both')
  other = await instance(OLD, NEW)
  // Step 2: each in turn signs with the new one, and verifies the old.
  one = await instance(NEW, OLD)
  const signedNew = (await signIn(one)).accessToken
  t.same(await served(signedNew), [200, 200], 'step 2, one instance restarted: its token (the new secret\'s) is served by the other too')
  t.same(await served(signedOld), [200, 200], 'and the old secret\'s still is, on both')
  other = await instance(NEW, OLD)
  t.same([...await served(signedNew), ...await served(signedOld)], [200, 200, 200, 200], 'step 2 done: both tokens served by both')
  // Step 3, once the old secret's tokens have lapsed: it is dropped, and a session goes on by its refresh token.
  const { refreshToken } = await signIn(other)
  one = await instance(NEW)
  other = await instance(NEW)
  const refusal = await one.call('listItems', { token: signedOld })
  t.same([...await served(signedOld), refusal.json().message], [401, 401, 'The access token is invalid.'], 'step 3: a token of the dropped secret is refused (by then it has lapsed anyway)')
  const refreshed = await one.call('refreshTokens', { body: { refreshToken } })
  t.equal(refreshed.statusCode, 200, 'and a session refreshes as ever')
  t.same(await served(refreshed.json().accessToken as string), [200, 200])
})

t.test('a secret that verifies never signs: without step 1, an instance that does not know the new secret refuses its tokens', { skip: await redisSkip() }, async (t) => {
  const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t) }
  const signing = await build(t, { ...shared, JWT_SECRET: NEW, JWT_VERIFY_SECRETS: OLD })
  const behind = await build(t, { ...shared, JWT_SECRET: OLD })
  const { accessToken } = await signing.register()
  const refused = await behind.call('listItems', { token: accessToken })
  t.same([refused.statusCode, refused.json().message], [401, 'The access token is invalid.'], 'its signature is the new secret\'s alone')
  t.equal((await signing.call('listItems', { token: accessToken })).statusCode, 200, 'where it is known, it is served')
})

t.test('a token a verifying secret signed is held to the same checks as the signing secret\'s: expired is TOKEN_EXPIRED', async (t) => {
  const api = await build(t, { JWT_SECRET: NEW, JWT_VERIFY_SECRETS: OLD })
  const { accessToken } = await api.register()
  const now = Math.floor(Date.now() / 1000)
  // The same claims as a token the service signed, re-signed with the verifying secret: once lapsed, then live.
  const claims = { ...decodeClaims(accessToken), iat: now - 1000, exp: now - 100 }
  const expired = await api.call('listItems', { token: forgeToken({ alg: 'HS256', typ: 'JWT' }, claims, OLD) })
  t.same([expired.statusCode, expired.json().code], [401, 'TOKEN_EXPIRED'])
  const live = await api.call('listItems', { token: forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...claims, iat: now, exp: now + 60 }, OLD) })
  t.equal(live.statusCode, 200, 'and served while it lives')
  const other = await api.call('listItems', { token: forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...claims, iat: now, exp: now + 60 }, 'a-secret-neither-signing-nor-verifying-here') })
  t.same([other.statusCode, other.json().message], [401, 'The access token is invalid.'], 'a secret that is neither is refused')
})
