// Run in a checkout whose contract gives items a property more (test/contract/data-from-contract.test.ts makes one):
// builds the service on each store and sends the property through a create, its replay, a get, a list and an edit,
// printing as JSON what each answered; then counts the creates two accounts make before their quotas refuse them,
// one sending the property and one not. Arguments: the property's name, its value at the create, its value at the edit
// (each as JSON).
import { randomUUID } from 'node:crypto'
import { deleteKeys, REDIS_URL } from '../../harness/redis-keys.js'
import { buildApp, loadConfig } from '../../src/index.js'

const [property, createdJson, editedJson] = process.argv.slice(2)
if (property === undefined || createdJson === undefined || editedJson === undefined) throw new Error('usage: property-round-trip <property> <created, JSON> <edited, JSON>')
const [created, edited] = [JSON.parse(createdJson) as unknown, JSON.parse(editedJson) as unknown]

interface Answer { status: number, body: unknown }

const answers: Record<string, Record<string, Answer>> = {}
for (const store of ['memory', 'redis']) {
  const prefix = `items-service-test:round-trip:${randomUUID()}:`
  const app = await buildApp(loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    RATE_LIMIT: 'off',
    JWT_SECRET: 'a-test-secret-that-is-at-least-32-bytes-long',
    CONTRACT_STRICT_RESPONSES: '1',
    PASSWORD_HASH_MEMORY_KIB: '8',
    PASSWORD_HASH_PASSES: '1',
    STORE: store,
    REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    ACCOUNT_QUOTA_KIB: '64'
  }))
  try {
    const send = async (name: string, method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object, headers: Record<string, string> = {}): Promise<Answer> => {
      const response = await app.inject({ method, url, payload, headers })
      const answer = { status: response.statusCode, body: response.body === '' ? null : JSON.parse(response.body) as unknown }
      answers[store] = { ...answers[store], [name]: answer }
      return answer
    }
    const registration = await send('register', 'POST', '/v1/auth/register', { email: `round-trip-${store}@example.com`, password: 'a-password-long-enough', firstName: 'Round', lastName: 'Trip', role: 'contributor' })
    const { accessToken, user } = registration.body as { accessToken: string, user: { id: string } }
    const caller = { authorization: `Bearer ${accessToken}` }
    const creation = { name: 'An item', [property]: created }
    const { body } = await send('create', 'POST', '/v1/items', creation, { ...caller, 'idempotency-key': 'round-trip' })
    await send('replay', 'POST', '/v1/items', creation, { ...caller, 'idempotency-key': 'round-trip' })
    const { id } = body as { id: string }
    await send('get', 'GET', `/v1/items/${id}`, undefined, caller)
    await send('list', 'GET', `/v1/items?contributorId=${user.id}`, undefined, caller)
    await send('edit', 'PATCH', `/v1/items/${id}`, { [property]: edited }, caller)
    await send('getEdited', 'GET', `/v1/items/${id}`, undefined, caller)
    for (const sending of [true, false]) {
      const filler = await send(`filler-${String(sending)}`, 'POST', '/v1/auth/register', { email: `filler-${String(sending)}-${store}@example.com`, password: 'a-password-long-enough', firstName: 'Fill', lastName: 'Er', role: 'contributor' })
      const headers = { authorization: `Bearer ${(filler.body as { accessToken: string }).accessToken}` }
      let made = 0
      for (; made < 10_000 && (await app.inject({ method: 'POST', url: '/v1/items', payload: { name: 'A filler', description: 'd'.repeat(500), ...(sending ? { [property]: created } : {}) }, headers })).statusCode === 201;) made += 1
      answers[store] = { ...answers[store], [`made-${String(sending)}`]: { status: made, body: null } }
    }
  } finally {
    await app.close()
    if (store === 'redis') await deleteKeys(prefix)
  }
}
process.stdout.write(JSON.stringify(answers))
