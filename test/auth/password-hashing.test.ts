import { readdirSync, readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { availableParallelism } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { OWASP_HASH_COST } from '../../src/auth/hash-cost.js'
import { HashingProcess } from '../../src/auth/hashing-process.js'
import { loadConfig } from '../../src/config/config.js'
import { createMemoryStore } from '../../src/store/memory/index.js'
import { newUser } from '../support/api.js'
import { build, productionHashCost } from '../support/app.js'
import { INTERNAL_ERROR_BODY } from '../../src/errors.js'

// The queue's tests need hashes that take as long as production's; the helper's shared process makes the cheapest.
const productionHashing = new HashingProcess(OWASP_HASH_COST)
t.teardown(async () => { await productionHashing.close() })

interface ProcessStat { pid: number, parentPid: number, niceness: number, cpuTicks: number }

// /proc/<pid>/stat: the command name is in parentheses and may hold spaces, so fields are counted after it.
function processStat (pid: number): ProcessStat | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    return { pid, parentPid: Number(fields[1]), niceness: Number(fields[16]), cpuTicks: Number(fields[11]) + Number(fields[12]) }
  } catch {
    return undefined
  }
}

function hashingProcesses (): ProcessStat[] {
  return readdirSync('/proc').filter((name) => /^\d+$/.test(name))
    .map((name) => processStat(Number(name)))
    .filter((stat): stat is ProcessStat => stat?.parentPid === process.pid)
}

t.test('argon2 runs in a child process at a lower CPU priority, every thread of it', async (t) => {
  const api = await build(t)
  await api.register()
  const [child] = hashingProcesses()
  if (child === undefined) throw new Error('no hashing process')
  const threads = readdirSync(`/proc/${child.pid}/task`).map((thread) => readFileSync(`/proc/${child.pid}/task/${thread}/stat`, 'utf8'))
  t.ok(threads.length > 1)
  for (const thread of threads) t.equal(Number(thread.split(') ')[1]?.split(' ')[16]), 10)
})

t.test('when the hashing process dies, the sign-ins it was working on fail with a 500 and the next start a new one', async (t) => {
  const others = new Set(hashingProcesses().map((stat) => stat.pid))
  const ownProcesses = (): ProcessStat[] => hashingProcesses().filter((stat) => !others.has(stat.pid))
  // Production's cost, in a process of the app's own: the test must find its hashes in the middle of their work.
  const api = await build(t, productionHashCost, { hashingProcess: undefined })
  const user = newUser()
  await api.call('registerUser', { body: user })
  const login = async (): Promise<number> =>
    (await api.call('loginUser', { body: { email: user.email, password: user.password } })).statusCode
  const [child] = ownProcesses()
  if (child === undefined) throw new Error('no hashing process')

  const logins = Array.from({ length: 4 }, login)
  // Kill it once it is seen hashing, so that a sign-in is certainly in its hands.
  while ((processStat(child.pid)?.cpuTicks ?? Infinity) <= child.cpuTicks) await sleep(2)
  process.kill(child.pid, 'SIGKILL')
  const statuses = await Promise.all(logins)
  t.ok(statuses.includes(500), `statuses ${statuses.join(', ')}`)
  t.ok(statuses.every((status) => status === 200 || status === 500))
  t.equal(await login(), 200)
  const [successor, ...more] = ownProcesses()
  t.ok(successor !== undefined && successor.pid !== child.pid && more.length === 0, 'a new process took its place')
})

t.test('a stored hash argon2 cannot read fails that sign-in with a 500, not the process', async (t) => {
  const store = createMemoryStore()
  const user = newUser()
  await store.users.add({
    id: '6f1c2a4e-8a51-4b0e-9a55-0c4d7f3f1e20',
    email: user.email,
    emailKey: user.email,
    passwordHash: 'not an argon2 hash',
    firstName: user.firstName,
    lastName: user.lastName,
    role: 'viewer',
    createdAt: new Date().toISOString()
  })
  const api = await build(t, {}, { store })
  const response = await api.call('loginUser', { body: { email: user.email, password: user.password } })
  t.equal(response.statusCode, 500)
  t.same(response.json(), INTERNAL_ERROR_BODY)
  t.equal((await api.call('registerUser', { body: newUser() })).statusCode, 201)
})

t.test('sign-ins beyond the hashing queue are answered 503 with Retry-After at once, not queued', async (t) => {
  const api = await build(t, { PASSWORD_QUEUE_LIMIT: '2' }, { hashingProcess: productionHashing })
  const started = Date.now()
  const responses = await Promise.all(Array.from({ length: 12 }, async () => {
    const response = await api.call('loginUser', { body: { email: 'nobody@example.com', password: 'guess-guess' } })
    return { status: response.statusCode, body: response.json() as unknown, retryAfter: response.headers['retry-after'], after: Date.now() - started }
  }))
  const refused = responses.filter((response) => response.status === 503)
  t.ok(refused.length >= 12 - 2 - availableParallelism(), `${refused.length} refused`)
  t.same(responses.filter((response) => response.status !== 503).map((response) => response.status), Array<number>(12 - refused.length).fill(401))
  for (const response of refused) {
    t.match(response, { body: { code: 'SERVICE_UNAVAILABLE' }, retryAfter: /^\d+$/ })
  }
  const slowestRefusal = Math.max(...refused.map((response) => response.after))
  const fastestCheck = Math.min(...responses.filter((response) => response.status === 401).map((response) => response.after))
  t.ok(slowestRefusal < fastestCheck, `refusals within ${slowestRefusal} ms, before the first password check ended (${fastestCheck} ms)`)
})

t.test('a burst from one address, with nobody else waiting, is served whole: bursts wait their turn', async (t) => {
  const api = await build(t, { RATE_LIMIT: 'on' }, { hashingProcess: productionHashing })
  const users = Array.from({ length: 50 }, () => newUser())
  const registered = await Promise.all(users.map(async (body, index) =>
    (await api.call('registerUser', { body, remoteAddress: index < 20 ? '127.0.0.1' : `192.0.2.${index}` })).statusCode))
  t.same(registered, Array<number>(50).fill(201), '20 registrations from one address (its limit), 30 from others, at once')
  const signedIn = await Promise.all(users.map(async ({ email, password }) => (await api.call('loginUser', { body: { email, password } })).statusCode))
  t.same(signedIn, Array<number>(50).fill(200), '50 sign-ins of 50 accounts from one address')
})

t.test('a full hashing queue refuses from the address holding the most places, and addresses take turns', async (t) => {
  const api = await build(t, { PASSWORD_QUEUE_LIMIT: '8' }, { hashingProcess: productionHashing })
  const signIn = async (remoteAddress: string, email: string): Promise<{ status: number, at: number }> => {
    const response = await api.call('loginUser', { remoteAddress, body: { email, password: 'guess-guess' } })
    return { status: response.statusCode, at: performance.now() }
  }
  const flood = Array.from({ length: 20 }, async (_, index) => await signIn('192.0.2.1', `flood${index}@example.com`))
  // Every place is taken by the flood before the others arrive: the queue is full.
  await sleep(20)
  const others = await Promise.all(['192.0.2.2', '192.0.2.3', '2001:db8:1::1'].map(async (address) => await signIn(address, 'someone@example.com')))
  const flooded = await Promise.all(flood)
  t.same(others.map((answer) => answer.status), [401, 401, 401], 'the other addresses were queued, not refused')
  const checked = flooded.filter((answer) => answer.status === 401)
  t.ok(flooded.every((answer) => answer.status === 401 || answer.status === 503))
  t.ok(checked.length <= 8 + availableParallelism(), `the flood held ${checked.length} places: those hashing and waiting, less the three it gave up`)
  const lastOther = Math.max(...others.map((answer) => answer.at))
  const after = checked.filter((answer) => answer.at > lastOther).length
  t.ok(after >= checked.length - 3 * availableParallelism() - 3, `the others were answered before ${after} of the flood's ${checked.length} checks`)
})

t.test('a sign-in whose client has hung up is dropped before its password is hashed', async (t) => {
  const api = await build(t, { PASSWORD_QUEUE_LIMIT: '100' }, { hashingProcess: productionHashing })
  const address = await api.app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = new URL(address)
  const body = JSON.stringify({ email: 'nobody@example.com', password: 'guess-guess' })
  const signIn = async (): Promise<number> => {
    const started = Date.now()
    await fetch(`${address}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    return Date.now() - started
  }
  await signIn()
  const idle = await signIn()
  const abandoned = Array.from({ length: 60 }, () => {
    const socket = connect(Number(port), '127.0.0.1')
    socket.write(`POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
    return socket
  })
  await sleep(100)
  for (const socket of abandoned) socket.destroy()
  const afterFlood = await signIn()
  // Had the 60 abandoned checks been hashed, this one would have waited for all of them (60 × idle).
  t.ok(afterFlood < idle * 20 + 200, `a sign-in after 60 abandoned ones took ${afterFlood} ms (idle: ${idle} ms)`)
})

t.test('an app starts a hashing process of its own unless given one, and closing it ends only its own', async (t) => {
  const sharing = await build(t)
  await sharing.register()
  // The shared process, and any other this file's tests left running.
  const running = hashingProcesses().map((stat) => stat.pid).sort()
  const api = await build(t, {}, { hashingProcess: undefined })
  await api.register()
  const [own, ...others] = hashingProcesses().filter((stat) => !running.includes(stat.pid))
  if (own === undefined) throw new Error('no hashing process of its own')
  t.same(others, [], 'one of its own')
  await api.app.close()
  t.equal(processStat(own.pid), undefined, 'its own has exited')
  await sharing.app.close()
  t.same(hashingProcesses().map((stat) => stat.pid).sort(), running, 'a process given to an app outlives it')
})

t.test('a new password is hashed at the configured cost; production takes none below OWASP\'s minimum', async (t) => {
  const storedHash = async (env: NodeJS.ProcessEnv): Promise<string | undefined> => {
    const store = createMemoryStore()
    const api = await build(t, env, { store, hashingProcess: undefined })
    const { user } = await api.register()
    return (await store.users.get(user.id))?.passwordHash
  }
  t.match(await storedHash({ PASSWORD_HASH_MEMORY_KIB: '64', PASSWORD_HASH_PASSES: '3' }), /^\$argon2id\$v=19\$m=64,p=1,t=3\$/)
  t.match(await storedHash(productionHashCost), /^\$argon2id\$v=19\$m=19456,p=1,t=2\$/, 'the default')
  const production = { NODE_ENV: 'production', JWT_SECRET: 's'.repeat(32) } as const
  t.same(loadConfig(production).passwordHashCost, OWASP_HASH_COST)
  for (const cheaper of [{ PASSWORD_HASH_MEMORY_KIB: '19455' }, { PASSWORD_HASH_PASSES: '1' }]) {
    t.throws(() => loadConfig({ ...production, ...cheaper }), /PASSWORD_HASH_MEMORY_KIB and PASSWORD_HASH_PASSES below 19456 and 2 .* are for tests, not production/)
  }
  t.same(loadConfig({ ...production, PASSWORD_HASH_MEMORY_KIB: '65536', PASSWORD_HASH_PASSES: '3' }).passwordHashCost, { memoryKib: 65536, passes: 3 }, 'a dearer one is taken')
})
