import { availableParallelism } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { newUser, rateLimitItems } from '../support/api.js'
import { build, captureLogs, productionHashCost } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'
import { decodeClaims, forgeToken } from '../support/tokens.js'
import { until } from '../support/wait.js'
import { OWASP_HASH_COST } from '../../src/auth/hash-cost.js'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import { OutcomeUnknownError, type Store, StoreUnavailableError } from '../../src/store/store.js'

t.test('registerUser', async (t) => {
  t.test('creates the user, opens a session and answers with a token pair that no cache may keep', async (t) => {
    const api = await build(t)
    const body = newUser({ email: 'Ada.Lovelace@Example.com', role: 'viewer' })
    const response = await api.call('registerUser', { body })
    t.equal(response.statusCode, 201)
    t.equal(response.headers.pragma, 'no-cache', 'RFC 6749 §5.1: Pragma beside Cache-Control for HTTP/1.0 caches')
    t.equal(response.headers['cache-control'], 'no-store')
    const auth = response.json()
    t.match(auth.user, { email: 'Ada.Lovelace@Example.com', firstName: body.firstName, lastName: body.lastName, role: 'viewer' })
    t.equal(auth.expiresIn, 900)
    t.match(auth.refreshToken, /^[A-Za-z0-9_-]{43}$/, '256 random bits, base64url')
    const claims = decodeClaims(auth.accessToken)
    t.match(claims, { sub: auth.user.id, sid: String, jti: String, typ: 'access', iss: 'items-service', aud: 'items-service' })
    t.equal(Number(claims.exp) - Number(claims.iat), auth.expiresIn, 'expiresIn is the token lifetime')
    t.notMatch(response.body, /password|argon2/)
  })

  t.test('ACCESS_TOKEN_TTL_SECONDS sets the access token lifetime', async (t) => {
    const api = await build(t, { ACCESS_TOKEN_TTL_SECONDS: '60' })
    const { accessToken, expiresIn } = await api.register()
    const claims = decodeClaims(accessToken)
    t.equal(expiresIn, 60)
    t.equal(Number(claims.exp) - Number(claims.iat), 60)
  })

  t.test('emails are unique whatever their case, spacing or Unicode form', async (t) => {
    const api = await build(t)
    await api.register({ email: 'jose@example.com' })
    for (const email of ['JOSE@example.com', 'Jose@Example.COM']) {
      const response = await api.call('registerUser', { body: newUser({ email }) })
      t.equal(response.statusCode, 409, email)
      t.same(response.json(), { code: 'EMAIL_ALREADY_REGISTERED', message: 'This email is already registered.' })
    }
  })

  t.test('twenty concurrent registrations of one email, from twenty clients, give exactly one 201 and nineteen 409', async (t) => {
    const api = await build(t)
    const body = newUser()
    const responses = await Promise.all(Array.from({ length: 20 }, async (_, index) => await api.call('registerUser', {
      remoteAddress: `192.0.2.${index + 1}`,
      body: { ...body, email: index % 2 === 0 ? body.email : body.email.toUpperCase() }
    })))
    const statuses = responses.map((response) => response.statusCode).sort()
    t.same(statuses, [201, ...Array<number>(19).fill(409)])
  })

  t.test('twenty parallel registrations of one email from one address give one 201 and nineteen 409 after a single hash', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on' })
    let hashes = 0
    const { hash } = api.app.passwords
    api.app.passwords.hash = async (...args) => { hashes += 1; return await hash(...args) }
    const body = newUser()
    const responses = await Promise.all(Array.from({ length: 20 }, async () => await api.call('registerUser', { body })))
    t.same(responses.map((response) => response.statusCode).sort(), [201, ...Array<number>(19).fill(409)])
    t.equal(hashes, 1, 'the registrations that found the email in flight waited for its outcome instead of hashing')
  })

  t.test('two instances on one store registering one email at once give one 201 and one 409', async (t) => {
    const store = createMemoryStore()
    const [one, other] = [await build(t, {}, { store }), await build(t, {}, { store })]
    const body = newUser()
    const statuses = await Promise.all([one, other].map(async (api) => (await api.call('registerUser', { body })).statusCode))
    t.same(statuses.sort(), [201, 409])
  })

  t.test('a registration made whose session could not be opened is not answered "nothing was done": 504, and the retry finds the email registered', async (t) => {
    // Redis out of reach as the session is opened, or the session's own reply lost.
    for (const failure of [new StoreUnavailableError('Redis is unreachable'), new OutcomeUnknownError('the reply was lost')]) {
      const store = createMemoryStore()
      const api = await build(t, {}, {
        store: {
          ...store,
          sessions: Object.assign(Object.create(store.sessions) as Store['sessions'], {
            open: async () => { throw failure }
          })
        }
      })
      const body = newUser()
      const registered = await api.call('registerUser', { body })
      t.same([registered.statusCode, registered.json().code], [504, 'OUTCOME_UNKNOWN'], `${failure.name}: the account was made, so its outcome is not "not done"`)
      t.equal((await api.call('registerUser', { body })).statusCode, 409, 'the retry finds it, as the 504 says it may')
    }
  })

  t.test('a refresh whose token rotated but whose user could not be read is not answered "nothing was done": 504, and the retry within the leeway is 200', async (t) => {
    const store = createMemoryStore()
    let unreachable = false
    const api = await build(t, {}, {
      store: {
        ...store,
        // The store's own users, but for `get`: its methods called on it, whose fields are its own.
        users: new Proxy(store.users, {
          get: (users, name: keyof Store['users']) => name === 'get'
            ? async (id: string) => {
              if (unreachable) throw new StoreUnavailableError('Redis is unreachable')
              return await users.get(id)
            }
            : users[name].bind(users)
        })
      }
    })
    const { refreshToken } = await api.register()
    unreachable = true
    const refreshed = await api.call('refreshTokens', { body: { refreshToken } })
    t.same([refreshed.statusCode, refreshed.json().code], [504, 'OUTCOME_UNKNOWN'], 'the token was rotated: its outcome is not "not done"')
    unreachable = false
    t.equal((await api.call('refreshTokens', { body: { refreshToken } })).statusCode, 200, 'the retry, within the leeway, is served')
  })

  t.test('passwords of 8 to 128 characters are accepted as typed, never trimmed', async (t) => {
    const api = await build(t)
    t.equal((await api.call('registerUser', { body: newUser({ password: 'short12' }) })).statusCode, 400)
    t.equal((await api.call('registerUser', { body: newUser({ password: 'x'.repeat(129) }) })).statusCode, 400)
    const password = '  Spaces Around  '
    const { user } = await api.register({ email: 'spaces@example.com', password })
    const exact = await api.call('loginUser', { body: { email: 'spaces@example.com', password } })
    t.equal(exact.statusCode, 200)
    t.equal(exact.json().user.id, user.id)
    const trimmed = await api.call('loginUser', { body: { email: 'spaces@example.com', password: password.trim() } })
    t.equal(trimmed.statusCode, 401)
  })

  t.test('neither the password nor its hash appears in any log line', async (t) => {
    const { lines, logStream } = captureLogs()
    const api = await build(t, { LOG_LEVEL: 'trace' }, { logStream })
    const password = 'a very distinctive password'
    await api.register({ email: 'logs@example.com', password })
    await api.call('loginUser', { body: { email: 'logs@example.com', password } })
    await api.call('loginUser', { body: { email: 'logs@example.com', password: 'wrong password!' } })
    t.ok(lines.length > 0)
    t.notMatch(lines.join('\n'), /distinctive|wrong password|\$argon2/)
  })
})

t.test('loginUser', async (t) => {
  t.test('opens a new session for the right password', async (t) => {
    const api = await build(t)
    const registered = await api.register({ email: 'login@example.com' })
    const response = await api.call('loginUser', { body: { email: 'LOGIN@example.com', password: 'correct horse battery staple' } })
    t.equal(response.statusCode, 200)
    t.equal(response.headers['cache-control'], 'no-store')
    t.same(response.json().user, registered.user)
    t.not(decodeClaims(response.json().accessToken).sid, decodeClaims(registered.accessToken).sid)
  })

  t.test('an unknown email and a wrong password get the same answer after the same work: one argon2 verification at the same cost', async (t) => {
    // Counted, not timed: each verification is the hashing process's argon2id at one cost, a stored hash's or (for
    // an unknown email) a dummy one made at the configured cost, so equal counts are equal times on any machine.
    const verified: Array<string | undefined> = []
    class ObservedHashing extends HashingProcess {
      override async verify (hash: string | undefined, password: string): Promise<boolean> {
        verified.push(hash)
        return await super.verify(hash, password)
      }
    }
    const hashing = new ObservedHashing(OWASP_HASH_COST)
    t.teardown(async () => { await hashing.close() })
    const api = await build(t, productionHashCost, { hashingProcess: hashing })
    await api.register({ email: 'known@example.com' })
    const known = await api.call('loginUser', { body: { email: 'known@example.com', password: 'not the password' } })
    const unknown = await api.call('loginUser', { body: { email: 'nobody@example.com', password: 'not the password' } })
    t.same([known.statusCode, unknown.statusCode], [401, 401])
    t.same(JSON.parse(unknown.body), { code: 'INVALID_CREDENTIALS', message: 'The email or password is incorrect.' })
    t.equal(unknown.body, known.body, 'the same answer')
    t.equal(verified.length, 2, 'one verification each')
    t.match(verified[0], /^\$argon2id\$v=19\$m=19456,p=1,t=2\$/, 'the known user\'s hash, at the configured cost')
    t.equal(verified[1], undefined, 'for the unknown email, the dummy hash the hashing process makes at that cost')
  })
})

t.test('access tokens', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  const claims = decodeClaims(accessToken)
  const now = Math.floor(Date.now() / 1000)
  const valid = { ...claims, iat: now, exp: now + 60 }
  const listWith = async (authorization?: string) =>
    await api.inject({ method: 'GET', url: '/v1/items', headers: authorization === undefined ? {} : { authorization } })

  t.test('a valid token is accepted', async (t) => {
    t.equal((await listWith(`Bearer ${accessToken}`)).statusCode, 200)
    t.equal((await listWith(`bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, valid)}`)).statusCode, 200, 'scheme is case-insensitive')
  })

  t.test('no token, or another scheme, is AUTHENTICATION_REQUIRED', async (t) => {
    for (const header of [undefined, 'Basic dXNlcjpwYXNz']) {
      const response = await listWith(header)
      t.equal(response.statusCode, 401)
      t.same(response.json(), { code: 'AUTHENTICATION_REQUIRED', message: 'An access token is required.' })
      t.equal(response.headers['www-authenticate'], 'Bearer realm="items"')
    }
  })

  t.test('an expired token with a valid signature is TOKEN_EXPIRED', async (t) => {
    const response = await listWith(`Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, iat: now - 120, exp: now - 60 })}`)
    t.equal(response.statusCode, 401)
    t.equal(response.json().code, 'TOKEN_EXPIRED')
    t.match(response.headers['www-authenticate'], /error="invalid_token"/)
  })

  t.test('a token accepted before is refused once it has expired', async (t) => {
    const expiresAt = now + 60
    const header = `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, exp: expiresAt })}`
    t.equal((await listWith(header)).statusCode, 200)
    // A token's times are by the store's clock: on Redis, Redis's, which this process reckons as an offset from its own.
    t.capture(Date, 'now', () => 0)
    const storeAhead = api.app.store.now()
    t.capture(Date, 'now', () => expiresAt * 1000 - storeAhead)
    t.equal((await listWith(header)).statusCode, 200, 'still valid in the second it expires')
    t.capture(Date, 'now', () => expiresAt * 1000 - storeAhead + 1)
    const response = await listWith(header)
    t.equal(response.statusCode, 401)
    t.equal(response.json().code, 'TOKEN_EXPIRED')
  })

  const forgeries: Record<string, string> = {
    'Bearer with nothing after it': 'Bearer ',
    'a token that is not a JWT': 'Bearer not-a-jwt',
    'a wrong signature': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, valid, 'another-secret-of-at-least-32-bytes!!')}`,
    'alg none': `Bearer ${forgeToken({ alg: 'none', typ: 'JWT' }, valid).split('.').slice(0, 2).join('.')}.`,
    'another algorithm in the header': `Bearer ${forgeToken({ alg: 'HS512', typ: 'JWT' }, valid)}`,
    'nbf in the future': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, nbf: now + 600 })}`,
    'iat ten years ahead': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, iat: now + 10 * 365 * 86400, exp: now + 10 * 365 * 86400 + 60 })}`,
    'a lifetime longer than the service issues': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, exp: 1e20 })}`,
    'no exp claim': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, exp: undefined })}`,
    'another audience': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, aud: 'another-service' })}`,
    'a token that is not an access token': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, typ: 'refresh' })}`,
    'a session that does not exist': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, sid: '00000000-0000-4000-8000-000000000000' })}`,
    'a session of another user': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, sub: '00000000-0000-4000-8000-000000000000' })}`,
    // Signed with the secret, yet not of the types and forms this service issues: each would skip a check.
    'an iat that is a string': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, iat: String(now) })}`,
    'an exp that is a string': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, exp: String(now + 60) })}`,
    'an iat that is not a whole number': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, iat: now + 0.5 })}`,
    'a sub in upper case': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, sub: String(claims.sub).toUpperCase() })}`,
    'a sid that is a number': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, sid: 1 })}`,
    'a jti that is an object': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, jti: {} })}`,
    'a token longer than any the service issues': `Bearer ${forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...valid, padding: 'x'.repeat(8000) })}`
  }
  for (const [name, header] of Object.entries(forgeries)) {
    t.test(`${name} is INVALID_TOKEN`, async (t) => {
      const response = await listWith(header)
      t.equal(response.statusCode, 401)
      t.equal(response.json().code, 'INVALID_TOKEN')
      t.match(response.headers['www-authenticate'], /^Bearer realm="items", error="invalid_token"/)
    })
  }

  t.test('authentication comes before validation, so an anonymous caller learns nothing about the body', async (t) => {
    const response = await api.inject({ method: 'POST', url: '/v1/items', payload: { bogus: true } })
    t.equal(response.statusCode, 401)
    t.equal(response.json().code, 'AUTHENTICATION_REQUIRED')
  })

  t.test('the role comes from the store: a token that claims one was not issued by the service (it is longer than those it issues)', async (t) => {
    const viewer = await api.register({ role: 'viewer' })
    const viewerClaims = decodeClaims(viewer.accessToken)
    const claimsContributor = forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...viewerClaims, role: 'contributor' })
    const total = async (): Promise<number> => (await api.call('listItems', { token: viewer.accessToken })).json().pagination.total
    const before = await total()
    const response = await api.call('createItem', { token: claimsContributor, body: { name: 'x' } })
    t.equal(response.statusCode, 401)
    t.equal(response.json().code, 'INVALID_TOKEN')
    t.equal(await total(), before, 'nothing was created')
  })
})

t.test('an account removed between its registration and its first session answers 503 and leaves nothing: registering again works', async (t) => {
  const memory = createMemoryStore()
  let removeNext = true
  // An operator's DELETE /accounts/{id} landing the moment the user is stored, before its session opens.
  const store: Store = {
    ...memory,
    users: {
      add: async (user) => {
        const added = await memory.users.add(user)
        if (removeNext) await memory.accounts.remove(user.id)
        removeNext = false
        return added
      },
      get: async (id) => await memory.users.get(id),
      cached: (id) => memory.users.cached(id),
      findByEmailKey: async (key) => await memory.users.findByEmailKey(key)
    }
  }
  const api = await build(t, {}, { store })
  const body = newUser()
  const raced = await api.call('registerUser', { body })
  t.equal(raced.statusCode, 503)
  t.match(raced.json(), { code: 'SERVICE_UNAVAILABLE', message: /removed as it was registered/ })
  t.equal((await memory.accounts.list(undefined, 10)).accounts.length, 0, 'no account left')
  t.equal((await api.call('registerUser', { body })).statusCode, 201, 'the same email registers again')
})

t.test('a store that has nothing at hand (a Redis instance that has just started) is asked on every request, with the same outcomes', async (t) => {
  const store = createMemoryStore()
  const { users, sessions } = store
  const nothingAtHand: Store = {
    ...store,
    users: { add: async (user) => await users.add(user), get: async (id) => await users.get(id), findByEmailKey: async (key) => await users.findByEmailKey(key), cached: () => undefined },
    sessions: {
      open: async (session, hash, max) => { await sessions.open(session, hash, max) },
      get: async (id, now) => await sessions.get(id, now),
      rotateRefreshToken: async (...rotation) => await sessions.rotateRefreshToken(...rotation),
      revoke: async (id) => { await sessions.revoke(id) },
      sweep: async (now, limit) => await sessions.sweep(now, limit),
      cached: () => undefined
    }
  }
  const api = await build(t, {}, { store: nothingAtHand })
  const { accessToken, user } = await api.register()
  const created = await api.createItem(accessToken)
  t.equal(created.contributorId, user.id)
  t.equal((await api.call('listItems', { token: accessToken })).json().pagination.total, 1)
  const now = Math.floor(Date.now() / 1000)
  const ofAnotherUser = forgeToken({ alg: 'HS256', typ: 'JWT' }, { ...decodeClaims(accessToken), iat: now, exp: now + 60, sub: '00000000-0000-4000-8000-000000000000' })
  t.equal((await api.call('listItems', { token: ofAnotherUser })).json().code, 'INVALID_TOKEN', 'a session of another user')
  t.equal((await api.call('logoutUser', { token: accessToken })).statusCode, 204)
  const ended = await api.call('listItems', { token: accessToken })
  t.equal(ended.statusCode, 401)
  t.same(ended.json(), { code: 'INVALID_TOKEN', message: 'The session of this access token has ended.' })
})

t.test('sessions', async (t) => {
  t.test('a user has at most MAX_SESSIONS_PER_USER live sessions; the oldest ends first', async (t) => {
    const api = await build(t, { MAX_SESSIONS_PER_USER: '2' })
    const body = newUser()
    const first = (await api.call('registerUser', { body })).json()
    const signIn = async (): Promise<{ accessToken: string }> =>
      (await api.call('loginUser', { body: { email: body.email, password: body.password } })).json()
    const second = await signIn()
    const third = await signIn()
    t.equal((await api.call('listItems', { token: first.accessToken })).json().code, 'INVALID_TOKEN', 'the oldest session ended')
    t.equal((await api.call('listItems', { token: second.accessToken })).statusCode, 200)
    t.equal((await api.call('listItems', { token: third.accessToken })).statusCode, 200)
  })

  t.test('ended sessions are swept on a timer, and a failing sweep is logged, not fatal', async (t) => {
    const { lines, logStream } = captureLogs()
    // The memory store's sweep (Redis expires sessions by itself).
    const api = await build(t, { STORE: 'memory', REFRESH_TOKEN_TTL_SECONDS: '1', SESSION_SWEEP_INTERVAL_MS: '50', LOG_LEVEL: 'error' }, { logStream })
    await api.register()
    await api.register()
    const sessions = api.app.store.sessions
    const sweep = sessions.sweep.bind(sessions)
    const forgotten: number[] = []
    t.capture(sessions, 'sweep', async (now: number, limit: number) => {
      const count = await sweep(now, limit)
      forgotten.push(count)
      return count
    })
    const ended = Date.now() + 1001
    t.capture(Date, 'now', () => ended)
    while (forgotten.length === 0) await sleep(10)
    t.equal(forgotten[0], 2, 'both ended sessions forgotten in one sweep')

    t.capture(sessions, 'sweep', async () => { throw new Error('store unreachable') })
    while (!lines.some((line) => line.includes('session sweep failed'))) await sleep(10)
    t.equal((await api.call('checkLiveness')).statusCode, 200)
  })
})

t.test('refreshTokens', async (t) => {
  t.test('returns a new pair and makes the old refresh token single-use', async (t) => {
    const api = await build(t)
    const first = await api.register()
    const response = await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })
    t.equal(response.statusCode, 200)
    t.equal(response.headers['cache-control'], 'no-store')
    const second = response.json()
    t.not(second.refreshToken, first.refreshToken)
    t.not(second.accessToken, first.accessToken)
    t.same(second.user, first.user)
    t.equal(decodeClaims(second.accessToken).sid, decodeClaims(first.accessToken).sid, 'same session')
    t.equal((await api.call('listItems', { token: second.accessToken })).statusCode, 200)
  })

  t.test('with REFRESH_REUSE_LEEWAY_SECONDS=0, presenting a used refresh token revokes the whole session', async (t) => {
    const api = await build(t, { REFRESH_REUSE_LEEWAY_SECONDS: '0' })
    const first = await api.register()
    const second = (await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })).json()
    const replay = await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })
    t.equal(replay.statusCode, 401)
    t.same(replay.json(), { code: 'INVALID_REFRESH_TOKEN', message: 'The refresh token is invalid.' })
    t.equal((await api.call('refreshTokens', { body: { refreshToken: second.refreshToken } })).statusCode, 401, 'the newest refresh token is revoked too')
    const afterRevocation = await api.call('listItems', { token: second.accessToken })
    t.equal(afterRevocation.statusCode, 401)
    t.equal(afterRevocation.json().code, 'INVALID_TOKEN', 'and so is the access token')
  })

  t.test('with REFRESH_REUSE_LEEWAY_SECONDS=0, ten concurrent refreshes with one token give exactly one 200', async (t) => {
    const api = await build(t, { REFRESH_REUSE_LEEWAY_SECONDS: '0' })
    const { refreshToken } = await api.register()
    const responses = await Promise.all(Array.from({ length: 10 }, async () =>
      await api.call('refreshTokens', { body: { refreshToken } })))
    t.same(responses.map((response) => response.statusCode).sort(), [200, ...Array<number>(9).fill(401)])
  })

  t.test('within the leeway, 20 parallel refreshes with one token all succeed, and every pair keeps working', async (t) => {
    const api = await build(t)
    const first = await api.register()
    const responses = await Promise.all(Array.from({ length: 20 }, async () =>
      await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })))
    t.same(responses.map((response) => response.statusCode), Array<number>(20).fill(200))
    const pairs = responses.map((response) => response.json() as { accessToken: string, refreshToken: string })
    t.equal(new Set(pairs.map((pair) => decodeClaims(pair.accessToken).sid)).size, 1, 'one session')
    for (const pair of pairs) t.equal((await api.call('listItems', { token: pair.accessToken })).statusCode, 200)
    const refreshed = await Promise.all(pairs.map(async (pair) => await api.call('refreshTokens', { body: { refreshToken: pair.refreshToken } })))
    t.same(refreshed.map((response) => response.statusCode), Array<number>(20).fill(200), 'each refresh token of the window works once more')
  })

  t.test('a retry after a lost response gets a working pair; after the leeway the replay ends the session', async (t) => {
    const api = await build(t, { REFRESH_REUSE_LEEWAY_SECONDS: '5' })
    const first = await api.register()
    const lost = (await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })).json()
    const retry = await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })
    t.equal(retry.statusCode, 200, 'the just-replaced token, again, within 5 s')
    t.equal((await api.call('listItems', { token: retry.json().accessToken })).statusCode, 200)
    t.equal((await api.call('listItems', { token: lost.accessToken })).statusCode, 200, 'the pair whose response was lost works too')

    const next = (await api.call('refreshTokens', { body: { refreshToken: retry.json().refreshToken } })).json()
    // Read once the rotation has been answered, so never before the time it recorded, however slow the machine.
    const rotatedAt = Date.now()
    t.capture(Date, 'now', () => rotatedAt + 5001)
    const late = await api.call('refreshTokens', { body: { refreshToken: retry.json().refreshToken } })
    t.equal(late.statusCode, 401, 'the same replay after the leeway')
    t.equal(late.json().code, 'INVALID_REFRESH_TOKEN')
    t.equal((await api.call('listItems', { token: next.accessToken })).json().code, 'INVALID_TOKEN', 'ends the session')
  })

  t.test('a token replaced before the last rotation revokes the session even within the leeway', async (t) => {
    const api = await build(t)
    const first = await api.register()
    const second = (await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })).json()
    const third = (await api.call('refreshTokens', { body: { refreshToken: second.refreshToken } })).json()
    t.equal((await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })).statusCode, 401)
    t.equal((await api.call('listItems', { token: third.accessToken })).statusCode, 401, 'the session has ended')
  })

  t.test('a replay of a token replaced more than 16 rotations ago is refused, but no longer ends the session', async (t) => {
    const api = await build(t)
    const first = await api.register()
    let current = first
    for (let rotation = 0; rotation < 18; rotation += 1) {
      current = (await api.call('refreshTokens', { body: { refreshToken: current.refreshToken } })).json()
    }
    const ancient = await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })
    t.equal(ancient.statusCode, 401)
    t.equal(ancient.json().code, 'INVALID_REFRESH_TOKEN')
    t.equal((await api.call('listItems', { token: current.accessToken })).statusCode, 200, 'the session lives on')
  })

  t.test('one rotation fans out into at most 32 pairs within the leeway; beyond that a retry is refused, not fatal', async (t) => {
    const api = await build(t)
    const first = await api.register()
    const responses = await Promise.all(Array.from({ length: 40 }, async () =>
      await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })))
    const statuses = responses.map((response) => response.statusCode)
    t.equal(statuses.filter((status) => status === 200).length, 32, 'the rotation and 31 retries')
    t.equal(statuses.filter((status) => status === 401).length, 8)
    const winner = responses.find((response) => response.statusCode === 200)?.json() as { accessToken: string }
    t.equal((await api.call('listItems', { token: winner.accessToken })).statusCode, 200, 'the session lives on')
  })

  t.test('an unknown or expired refresh token is INVALID_REFRESH_TOKEN', async (t) => {
    const api = await build(t, { REFRESH_TOKEN_TTL_SECONDS: '1' })
    const unknown = await api.call('refreshTokens', { body: { refreshToken: 'x'.repeat(43) } })
    t.equal(unknown.statusCode, 401)
    t.equal(unknown.json().code, 'INVALID_REFRESH_TOKEN')
    const { refreshToken, accessToken } = await api.register()
    const second = await api.register()
    const sessionsEnded = Date.now() + 1001
    t.capture(Date, 'now', () => sessionsEnded)
    t.equal((await api.call('listItems', { token: accessToken })).json().code, 'INVALID_TOKEN', 'the session has ended')
    t.equal((await api.call('refreshTokens', { body: { refreshToken } })).statusCode, 401)
    t.equal((await api.call('refreshTokens', { body: { refreshToken: second.refreshToken } })).statusCode, 401)
  })

  t.test('a session lasts REFRESH_TOKEN_TTL_SECONDS by the store\'s clock, however far this process\'s clock is from it', async (t) => {
    // Instances share Redis's clock (Store.now); this one's own clock is 5 s behind it.
    const store = createMemoryStore()
    const api = await build(t, { REFRESH_TOKEN_TTL_SECONDS: '10' }, { store: { ...store, now: () => Date.now() + 5000 } })
    const { refreshToken } = await api.register()
    const opened = Date.now()
    t.capture(Date, 'now', () => opened + 6000)
    const refreshed = await api.call('refreshTokens', { body: { refreshToken } })
    t.equal(refreshed.statusCode, 200, 'refreshed 6 s into its 10')
    const { accessToken, refreshToken: next } = refreshed.json()
    t.equal((await api.call('listItems', { token: accessToken })).statusCode, 200)
    t.capture(Date, 'now', () => opened + 10_001)
    t.equal((await api.call('listItems', { token: accessToken })).json().code, 'INVALID_TOKEN', 'ended once its 10 s have passed')
    t.equal((await api.call('refreshTokens', { body: { refreshToken: next } })).statusCode, 401)
  })

  t.test('a missing refresh token is a 400', async (t) => {
    const api = await build(t)
    const response = await api.call('refreshTokens', { body: {} })
    t.equal(response.statusCode, 400)
    t.same(response.json().details, [{ field: 'body.refreshToken', issue: 'is required' }])
  })
})

t.test('logoutUser ends the current session only', async (t) => {
  const api = await build(t)
  const first = await api.register({ email: 'two-sessions@example.com' })
  const second = (await api.call('loginUser', { body: { email: 'two-sessions@example.com', password: 'correct horse battery staple' } })).json()
  const response = await api.call('logoutUser', { token: first.accessToken })
  t.equal(response.statusCode, 204)
  t.equal(response.body, '')
  const reused = await api.call('logoutUser', { token: first.accessToken })
  t.equal(reused.statusCode, 401)
  t.equal(reused.json().code, 'INVALID_TOKEN')
  t.equal((await api.call('refreshTokens', { body: { refreshToken: first.refreshToken } })).statusCode, 401)
  t.equal((await api.call('listItems', { token: second.accessToken })).statusCode, 200, 'the other session still works')
  t.equal((await api.call('refreshTokens', { body: { refreshToken: second.refreshToken } })).statusCode, 200)
})

t.test('rate limits', async (t) => {
  t.test('login attempts are limited per client address and email, with Retry-After', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN: '2', RATE_LIMIT_WINDOW_SECONDS: '60' })
    await api.register({ email: 'target@example.com' })
    const login = async (email: string) => await api.call('loginUser', { body: { email, password: 'guess-guess' } })
    t.equal((await login('target@example.com')).statusCode, 401)
    t.equal((await login('TARGET@example.com')).statusCode, 401)
    const limited = await login('target@example.com')
    t.equal(limited.statusCode, 429)
    t.equal(limited.json().code, 'RATE_LIMITED')
    t.match(limited.headers['retry-after'], /^\d+$/)
    t.equal((await login('someone-else@example.com')).statusCode, 401, 'other accounts are not throttled')
  })

  t.test('every response names the sign-in\'s limits (RateLimit-Policy) and what is left of those that counted it (RateLimit)', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN: '2', RATE_LIMIT_LOGIN_ADDRESS: '5', RATE_LIMIT_LOGIN_FAILURES: '4', RATE_LIMIT_WINDOW_SECONDS: '60' })
    const { email, password } = newUser()
    const registered = await api.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    // MAX_ACCOUNTS of the tests' apps, 10 000: a 25th of it an hour.
    t.same(rateLimitItems(registered.headers['ratelimit-policy']), { register: { q: 20, w: 60 }, registrations: { q: 400, w: 3600 } })
    t.match(rateLimitItems(registered.headers.ratelimit), { register: { r: 19, t: Number } })
    const login = async (guess: string, remoteAddress = '192.0.2.1') => await api.call('loginUser', { remoteAddress, body: { email, password: guess } })
    const failed = await login('wrong-password')
    t.equal(failed.statusCode, 401)
    t.same(rateLimitItems(failed.headers['ratelimit-policy']), { 'login-address': { q: 5, w: 60 }, login: { q: 2, w: 60 } }, 'the limits keyed by the caller')
    const afterFailure = rateLimitItems(failed.headers.ratelimit)
    t.same(afterFailure, { 'login-address': { r: 4, t: afterFailure['login-address']?.t }, login: { r: 1, t: afterFailure.login?.t } })
    for (const name of ['login-address', 'login'] as const) {
      t.ok(afterFailure[name]?.t! > 0 && afterFailure[name]?.t! <= 60, `${name}: t=${afterFailure[name]?.t} within its window`)
    }
    const succeeded = await login(password, '192.0.2.2')
    t.equal(succeeded.statusCode, 200)
    await login('wrong-password')
    const refused = await login('wrong-password')
    t.equal(refused.statusCode, 429)
    t.match(rateLimitItems(refused.headers.ratelimit), { 'login-address': { r: 2 }, login: { r: 0, t: Number(refused.headers['retry-after']) } },
      'the limit that refused it has nothing left until Retry-After')
    const invalid = await api.call('loginUser', { remoteAddress: '192.0.2.3', body: { email } })
    t.equal(invalid.statusCode, 400)
    t.same(Object.keys(rateLimitItems(invalid.headers.ratelimit)), ['login-address'], 'an invalid body counts against its address alone')
    t.ok(invalid.headers['ratelimit-policy'], 'and still names every limit')
  })

  t.test('a stranger who knows an email learns nothing of its failed sign-ins: no RateLimit field names the account\'s limit', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_FAILURES: '5' })
    const { email, password } = newUser()
    await api.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    const stranger = async () => await api.call('loginUser', { remoteAddress: '198.51.100.7', body: { email, password: 'a guess of mine' } })
    const before = await stranger()
    for (let failure = 0; failure < 3; failure += 1) await api.call('loginUser', { remoteAddress: '192.0.2.1', body: { email, password: 'the owner mistyping' } })
    const after = await stranger()
    t.same([before.statusCode, after.statusCode], [401, 401])
    for (const response of [before, after]) {
      t.notOk('login-failures' in rateLimitItems(response.headers.ratelimit), 'RateLimit says nothing of the account')
      t.notOk('login-failures' in rateLimitItems(response.headers['ratelimit-policy']), 'nor does RateLimit-Policy')
    }
    t.same(rateLimitItems(after.headers.ratelimit).login?.r, (rateLimitItems(before.headers.ratelimit).login?.r ?? 0) - 1, 'what it shows is the stranger\'s own')
  })

  t.test('with RATE_LIMIT=off no response names a limit', async (t) => {
    const api = await build(t)
    const response = await api.call('registerUser', { body: newUser() })
    t.equal(response.statusCode, 201)
    t.same([response.headers['ratelimit-policy'], response.headers.ratelimit], [undefined, undefined])
  })

  t.test('sign-in attempts are also limited per client address alone, before any password is checked', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_ADDRESS: '3', RATE_LIMIT_WINDOW_SECONDS: '60' })
    const statuses: number[] = []
    for (let attempt = 0; attempt < 5; attempt += 1) {
      statuses.push((await api.call('loginUser', { body: { email: `nobody${attempt}@example.com`, password: 'guess-guess' } })).statusCode)
    }
    t.same(statuses, [401, 401, 401, 429, 429], 'distinct emails from one address')
  })

  t.test('a locked key stays locked however many other keys are counted after it', async (t) => {
    // The memory store's bound (on Redis a key is only ever forgotten when its window ends), made small.
    const keysPerRateLimit = 500
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_ADDRESS: '2', RATE_LIMIT_WINDOW_SECONDS: '60' }, { store: createMemoryStore({ keysPerRateLimit }) })
    const attempt = async (remoteAddress: string, body: unknown = {}) => (await api.call('loginUser', { remoteAddress, body })).statusCode
    t.same([await attempt('198.51.100.1'), await attempt('198.51.100.1'), await attempt('198.51.100.1')], [400, 400, 429])
    // More client addresses than the limiter keeps keys for, each counted once (an invalid body costs no hash).
    for (let address = 0; address <= keysPerRateLimit; address += 1) await attempt(`10.0.${address >> 8}.${address & 255}`)
    t.equal(await attempt('198.51.100.1'), 429)
  })

  t.test('a sign-in refused by the hashing queue does not count against any rate limit', async (t) => {
    // The hashes are held until the whole burst has met the queue: those hashing (at most one a core) and the one
    // waiting are served, every other is refused, however fast the machine.
    const burst = availableParallelism() + 3
    const held: Array<() => void> = []
    let holding = true
    class HeldHashing extends HashingProcess {
      override async hash (password: string): Promise<string> {
        if (holding) await new Promise<void>((resolve) => held.push(resolve))
        return await super.hash(password)
      }
    }
    const hashing = new HeldHashing(OWASP_HASH_COST)
    t.teardown(async () => { await hashing.close() })
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: String(burst), PASSWORD_QUEUE_LIMIT: '1' }, { hashingProcess: hashing })
    let refused = 0
    const answers = Array.from({ length: burst }, async () => {
      const { statusCode } = await api.call('registerUser', { body: newUser() })
      if (statusCode === 503) refused += 1
      return statusCode
    })
    await until('the burst to be hashing, waiting or refused', () => held.length + 1 + refused === burst)
    t.ok(refused >= 2, `${refused} of the burst refused by the full queue`)
    holding = false
    for (const release of held) release()
    t.same((await Promise.all(answers)).filter((status) => status !== 503), Array<number>(burst - refused).fill(201), 'the others served')
    const retries = []
    for (let retry = 0; retry < refused; retry += 1) retries.push((await api.call('registerUser', { body: newUser() })).statusCode)
    t.same(retries, Array<number>(refused).fill(201), 'each refused client may retry')
    t.equal((await api.call('registerUser', { body: newUser() })).statusCode, 429, 'the limit still holds for what was served')
  })

  t.test('failed sign-ins count per account from any address: past the limit even the right password is 429 until the window ends', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_FAILURES_WINDOW_SECONDS: '600' })
    const { email, password } = newUser()
    await api.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    const guesses = []
    for (let network = 1; network <= 11; network += 1) {
      guesses.push((await api.call('loginUser', { remoteAddress: `2001:db8:${network}::1`, body: { email, password: 'wrong-password' } })).statusCode)
    }
    t.same(guesses, [...Array<number>(10).fill(401), 429], 'ten failures from ten networks, then refused')
    const right = await api.call('loginUser', { remoteAddress: '2001:db8:99::1', body: { email, password } })
    t.equal(right.statusCode, 429)
    t.same(right.json(), { code: 'RATE_LIMITED', message: 'Too many failed sign-ins to this account; try again later.' })
    t.ok(Number(right.headers['retry-after']) > 590, `Retry-After ${right.headers['retry-after']}: until the window ends`)
    t.equal((await api.call('loginUser', { body: { email: 'someone-else@example.com', password: 'wrong-password' } })).statusCode, 401,
      'other accounts are not locked')
  })

  t.test('on Redis, two instances count one account\'s failures together', { skip: await redisSkip() }, async (t) => {
    const shared = { STORE: 'redis', REDIS_KEY_PREFIX: redisKeyPrefix(t), RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_FAILURES: '4' }
    const [one, other] = [await build(t, shared), await build(t, shared)]
    const { email, password } = newUser()
    await one.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    const statuses = []
    for (const api of [one, other, one, other, one]) statuses.push((await api.call('loginUser', { body: { email, password: 'wrong-password' } })).statusCode)
    t.same(statuses, [401, 401, 401, 401, 429])
    t.equal((await other.call('loginUser', { body: { email, password } })).statusCode, 429, 'locked on both')
  })

  t.test('only failures count against an account: twenty parallel sign-ins with the right password all succeed', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN: '100' })
    const { email, password } = newUser()
    await api.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    const statuses = await Promise.all(Array.from({ length: 20 }, async () => (await api.call('loginUser', { body: { email, password } })).statusCode))
    t.same(statuses, Array<number>(20).fill(200))
  })

  t.test('a successful sign-in clears its account\'s failures', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_LOGIN_FAILURES: '2' })
    const { email, password } = newUser()
    await api.call('registerUser', { body: { email, password, firstName: 'A', lastName: 'B', role: 'viewer' } })
    const attempt = async (guess: string, remoteAddress: string): Promise<number> =>
      (await api.call('loginUser', { remoteAddress, body: { email, password: guess } })).statusCode
    t.same([await attempt('wrong-password', '192.0.2.1'), await attempt(password, '192.0.2.2')], [401, 200])
    t.same([await attempt('wrong-password', '192.0.2.3'), await attempt('wrong-password', '192.0.2.4'), await attempt(password, '192.0.2.5')],
      [401, 401, 429], 'two failures after the success lock it')
  })

  t.test('a hit that cannot be taken back is logged, and the answer stands', async (t) => {
    const memory = createMemoryStore()
    const store: Store = {
      ...memory,
      rateCounter: (name) => {
        const counter = memory.rateCounter(name)
        return { incr: counter.incr.bind(counter), peek: counter.peek.bind(counter), refund: async () => { throw new Error('the store lost it') }, reset: counter.reset.bind(counter) }
      }
    }
    const { lines, logStream } = captureLogs()
    const api = await build(t, { RATE_LIMIT: 'on', PASSWORD_QUEUE_LIMIT: '1', LOG_LEVEL: 'warn' }, { store, logStream })
    const burst = await Promise.all(Array.from({ length: 5 }, async () => (await api.call('registerUser', { body: newUser() })).statusCode))
    t.ok(burst.includes(503), `a burst past the queue: ${burst.join(' ')}`)
    t.match(lines.join(''), /"msg":"taking back a rate-limit hit failed; the limit counts the request"/)
  })

  t.test('an account counter that cannot be read refuses the sign-in (503); one that cannot be written leaves the answer as it is, logged', async (t) => {
    const memory = createMemoryStore()
    const failingAccountCounter = (failing: 'peek' | 'writes'): Store => ({
      ...memory,
      rateCounter: (name) => {
        const counter = memory.rateCounter(name)
        const fails = name === 'login-failures'
        return {
          incr: fails && failing === 'writes' ? (_key, _windowMs, _max, callback) => { callback(new Error('the store lost it')) } : counter.incr.bind(counter),
          peek: fails && failing === 'peek' ? (_key, _windowMs, callback) => { callback(new StoreUnavailableError('down')) } : counter.peek.bind(counter),
          refund: counter.refund.bind(counter),
          reset: fails && failing === 'writes' ? async () => { throw new Error('the store lost it') } : counter.reset.bind(counter)
        }
      }
    })
    const { email, password } = newUser()
    const user = { email, password, firstName: 'A', lastName: 'B', role: 'viewer' as const }
    const unreadable = await build(t, { RATE_LIMIT: 'on' }, { store: failingAccountCounter('peek') })
    await unreadable.call('registerUser', { body: user })
    t.equal((await unreadable.call('loginUser', { body: { email, password } })).statusCode, 503)
    const { lines, logStream } = captureLogs()
    const unwritable = await build(t, { RATE_LIMIT: 'on', LOG_LEVEL: 'warn' }, { store: failingAccountCounter('writes'), logStream })
    t.equal((await unwritable.call('loginUser', { body: { email, password: 'wrong-password' } })).statusCode, 401)
    t.equal((await unwritable.call('loginUser', { body: { email, password } })).statusCode, 200)
    t.equal(lines.filter((line) => line.includes('counting a sign-in failure failed')).length, 2, 'both logged')
  })

  t.test('registration and refresh are limited per client address', async (t) => {
    const api = await build(t, { RATE_LIMIT: 'on', RATE_LIMIT_REGISTER: '1', RATE_LIMIT_REFRESH: '1' })
    const { refreshToken } = await api.register()
    t.equal((await api.call('registerUser', { body: newUser() })).statusCode, 429)
    t.equal((await api.call('refreshTokens', { body: { refreshToken } })).statusCode, 200)
    t.equal((await api.call('refreshTokens', { body: { refreshToken: 'y'.repeat(43) } })).statusCode, 429)
  })
})
