import { readdirSync, readFileSync } from 'node:fs'
import t from 'tap'
import { createMemoryStore } from '../src/store/memory-store.js'
import { build, newUser } from './helper.js'
import { INTERNAL_ERROR_BODY } from '../src/errors.js'

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

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

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
  const api = await build(t)
  const user = newUser()
  await api.call('registerUser', { body: user })
  const login = async (): Promise<number> =>
    (await api.call('loginUser', { body: { email: user.email, password: user.password } })).statusCode
  const [child] = hashingProcesses()
  if (child === undefined) throw new Error('no hashing process')

  const logins = Array.from({ length: 4 }, login)
  // Kill it once it is seen hashing, so that a sign-in is certainly in its hands.
  while ((processStat(child.pid)?.cpuTicks ?? Infinity) <= child.cpuTicks) await sleep(2)
  process.kill(child.pid, 'SIGKILL')
  const statuses = await Promise.all(logins)
  t.ok(statuses.includes(500), `statuses ${statuses.join(', ')}`)
  t.ok(statuses.every((status) => status === 200 || status === 500))
  t.equal(await login(), 200)
  t.notSame(hashingProcesses().map((stat) => stat.pid), [child.pid])
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
