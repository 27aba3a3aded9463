// The class of issue 53, scaled down, on each store: accounts that fill the store within every limit they are
// given, in every way a request can make it keep bytes, cannot refuse a light account's writes.
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { REDIS_URL } from '../../harness/redis-keys.js'
import { redisKeys } from '../../src/store/redis/keys.js'
import { newUser } from '../support/api.js'
import { build } from '../support/app.js'
import { redisKeyPrefix, redisSkip } from '../support/redis.js'

// A description that the heap keeps in 10 000 bytes and its JSON text in 60 000: the heaviest a create can make.
const HEAVY = { name: 'h'.repeat(200), description: '\u0001'.repeat(10_000) }
const MAX_ATTACKERS = 40
const MAX_CREATES_PER_ATTACKER = 40
// An attacker's creates and deletes stay under it; what it sends past it is refused.
const WRITES_PER_WINDOW = 2 * MAX_CREATES_PER_ATTACKER + 10
const PASSWORD = 'correct horse battery staple'

// Room for 32 floors of 64 KiB (half of each for sessions); an account may grow to 1 MiB, so a couple of heavy
// accounts use up what is shared. Every limit is on, the write limit low enough for attackers to pass it.
const SCALED = {
  STORE_CAPACITY_MIB: '2',
  ACCOUNT_FLOOR_KIB: '64',
  ACCOUNT_SESSIONS_KIB: '32',
  ACCOUNT_CEILING_MIB: '1',
  RATE_LIMIT: 'on',
  RATE_LIMIT_REGISTER: '1000',
  RATE_LIMIT_LOGIN: '1000',
  RATE_LIMIT_LOGIN_ADDRESS: '1000',
  RATE_LIMIT_REFRESH: '1000',
  RATE_LIMIT_WRITES: String(WRITES_PER_WINDOW),
  // Long enough for the fan-outs below on any machine.
  REFRESH_REUSE_LEEWAY_SECONDS: '60'
}

// What a store keeps beside the ledger that a refused request could leave: on Redis, the writes' replies.
type Leftovers = () => Promise<number>

async function attack (t: Test, store: NodeJS.ProcessEnv, leftovers: Leftovers = async () => 0): Promise<void> {
  const api = await build(t, { ...SCALED, ...store })
  const incumbent = await api.register()
  const create = async (token: string, key: string, body: { name: string, description?: string } = { name: 'light' }) =>
    await api.call('createItem', { token, body, headers: { 'idempotency-key': key } })
  const kept = await create(incumbent.accessToken, 'incumbent-1')
  t.equal(kept.statusCode, 201)

  // Each attacker makes heavy creates under keys until refused; all but the first then delete their items, whose
  // keys stay, charged to them.
  const attackers: Array<{ email: string, accessToken: string, refusal: string, made: string[] }> = []
  let attackerUser = newUser({ password: PASSWORD })
  let registration = await api.call('registerUser', { body: attackerUser })
  while (registration.statusCode === 201 && attackers.length < MAX_ATTACKERS) {
    const { accessToken } = registration.json()
    const made: string[] = []
    let refusal = ''
    for (let index = 0; index < MAX_CREATES_PER_ATTACKER && refusal === ''; index += 1) {
      const response = await create(accessToken, `attack-${attackers.length}-${index}`, HEAVY)
      if (response.statusCode === 201) made.push(response.json().id)
      else refusal = `${response.statusCode} ${response.json().code} ${response.json().message}`
    }
    if (attackers.length > 0) {
      for (const itemId of made.splice(0)) t.equal((await api.call('deleteItem', { token: accessToken, params: { itemId } })).statusCode, 204)
    }
    attackers.push({ email: attackerUser.email, accessToken, refusal, made })
    attackerUser = newUser({ password: PASSWORD })
    registration = await api.call('registerUser', { body: attackerUser })
  }
  t.equal(registration.statusCode, 507, 'the attack ends when no floor can be guaranteed a newcomer')
  t.equal(registration.json().code, 'STORE_FULL')
  t.ok(attackers.length >= 2 && attackers.length < MAX_ATTACKERS, `${attackers.length} attackers filled the store`)
  t.match(attackers[0]!.refusal, /^507 STORE_FULL Your account holds as much/, 'the first attacker was stopped at its ceiling')
  t.match(attackers.at(-1)!.refusal, /^507 STORE_FULL The service holds as much/, 'the last, when the shared part was used up')

  // Sessions: three attackers sign in more often than they may keep sessions, and grow their newest to the most
  // a session remembers (32 pairs fanned out from each of its last rotations, 16 tokens replaced before); the
  // sessions that no longer fit their own room end, and the store keeps no more than its budget.
  for (const { email } of attackers.slice(1, 4)) {
    const signIns: string[] = []
    for (let index = 0; index < 25; index += 1) {
      const login = await api.call('loginUser', { body: { email, password: PASSWORD } })
      t.equal(login.statusCode, 200)
      signIns.push(login.json().refreshToken)
    }
    let presented = signIns.at(-1)!
    for (let rotation = 0; rotation < 18; rotation += 1) {
      const next = await api.call('refreshTokens', { body: { refreshToken: presented } })
      t.equal(next.statusCode, 200)
      const fannedOut = rotation >= 16 ? 31 : 0
      for (let pair = 0; pair < fannedOut; pair += 1) {
        t.equal((await api.call('refreshTokens', { body: { refreshToken: presented } })).statusCode, 200, 'a pair fanned out while the leeway lasts')
      }
      presented = next.json().refreshToken
    }
    const oldest = await api.call('refreshTokens', { body: { refreshToken: signIns[5]! } })
    t.equal(oldest.statusCode, 401, 'the attacker\'s own older sessions ended')
  }
  const held = await api.app.store.capacity()
  t.ok(held.heldBytes <= held.budgetBytes, `the store holds ${held.heldBytes} bytes of its ${held.budgetBytes}`)

  // Creates with keys sent past the write limit leave nothing charged.
  const { accessToken: limited } = (await api.call('loginUser', { body: { email: attackers[1]!.email, password: PASSWORD } })).json()
  let answer = 0
  for (let index = 0; index < WRITES_PER_WINDOW && answer !== 429; index += 1) {
    answer = (await create(limited, `limited-${index}`, { name: 'l' })).statusCode
  }
  t.equal(answer, 429, 'the attacker reached its write limit')
  const [before, leftBefore] = [(await api.app.store.capacity()).heldBytes, await leftovers()]
  for (let index = 0; index < 50; index += 1) {
    t.equal((await create(limited, `past-the-limit-${index}`, HEAVY)).statusCode, 429)
  }
  t.equal((await api.app.store.capacity()).heldBytes, before, 'refused claims keep no bytes')
  t.equal(await leftovers(), leftBefore, 'nor anything beside')

  // The light incumbent: a create with a key and its retry, an edit, a sign-in and a refresh.
  const created = await create(incumbent.accessToken, 'incumbent-2')
  t.equal(created.statusCode, 201, 'a create with a key')
  const retry = await create(incumbent.accessToken, 'incumbent-2')
  t.same([retry.statusCode, retry.headers['idempotent-replayed'], retry.json()], [201, 'true', created.json()], 'its retry is replayed')
  const edited = await api.call('updateItem', { token: incumbent.accessToken, params: { itemId: created.json().id }, body: { description: 'd'.repeat(1_000) } })
  t.equal(edited.statusCode, 200, 'an edit that grows the item')
  const login = await api.call('loginUser', { body: { email: incumbent.user.email, password: PASSWORD } })
  t.equal(login.statusCode, 200, 'a sign-in')
  t.equal((await api.call('listItems', { token: incumbent.accessToken })).statusCode, 200, 'and its first session goes on')
  t.equal((await api.call('refreshTokens', { body: { refreshToken: login.json().refreshToken } })).statusCode, 200, 'a refresh')

  // An attacker cannot grow past its floor while too little is shared; an edit that would is refused too.
  const attacker = attackers[0]!
  const small = await create(attacker.accessToken, 'small', { name: 'small' })
  const grown = small.statusCode === 201
    ? await api.call('updateItem', { token: attacker.accessToken, params: { itemId: small.json().id }, body: HEAVY })
    : small
  t.equal(grown.statusCode, 507, 'an attacker past its floor is refused')
  t.equal(grown.json().code, 'STORE_FULL')

  // The first attacker deletes its heavy items: room is shared again.
  for (const itemId of attacker.made) t.equal((await api.call('deleteItem', { token: attacker.accessToken, params: { itemId } })).statusCode, 204)
  const newcomer = await api.call('registerUser', { body: newUser() })
  t.equal(newcomer.statusCode, 201, 'a newcomer registers once a floor can be guaranteed again')
  t.equal((await create(newcomer.json().accessToken, 'newcomer-1')).statusCode, 201, 'and creates')
}

const WHAT = 'accounts that fill the store with heavy items, keys that outlive them, sessions and claims past their limit refuse no light account a write; a newcomer is refused only while no floor can be guaranteed'

t.test(`memory: ${WHAT}`, async (t) => { await attack(t, { STORE: 'memory' }) })

t.test(`Redis: ${WHAT}`, { skip: await redisSkip() }, async (t) => {
  const prefix = redisKeyPrefix(t)
  const redis = new Redis(REDIS_URL)
  t.teardown(() => { redis.disconnect() })
  const writeOutcomes = async (): Promise<number> => (await redis.keys(`${redisKeys(prefix).writeOutcome}*`)).length
  await attack(t, { STORE: 'redis', REDIS_KEY_PREFIX: prefix }, writeOutcomes)
})
