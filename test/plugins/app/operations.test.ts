// The operations API serves its own contract and Swagger UI on OPS_PORT, as the public API does, under the token its
// operations take (src/plugins/app/operations.ts).
import { readFileSync } from 'node:fs'
import t from 'tap'
import { parse } from 'yaml'
import { freePort } from '../../../harness/net.js'
import { build } from '../../support/app.js'

const OPS_TOKEN = 'an-operations-token-for-the-test'
const { info } = parse(readFileSync('ops/openapi.yaml', 'utf8')) as { info: { title: string, version: string } }

t.test('the operations API serves its contract (JSON and YAML) and its Swagger UI, under its token', async (t) => {
  const opsPort = await freePort()
  await build(t, { OPS_PORT: String(opsPort), OPS_TOKEN })
  const base = `http://127.0.0.1:${opsPort}`
  const authorized = { headers: { authorization: `Bearer ${OPS_TOKEN}` } }
  for (const path of ['/openapi.json', '/openapi.yaml', '/docs/']) {
    const refused = await fetch(`${base}${path}`)
    t.same([refused.status, await refused.json()], [401, { code: 'AUTHENTICATION_REQUIRED', message: 'The operations token is required.' }], `${path} without the token`)
    const wrong = await fetch(`${base}${path}`, { headers: { authorization: 'Bearer not-the-token' } })
    t.equal(wrong.status, 401, `${path} with another token`)
  }
  const json = await fetch(`${base}/openapi.json`, authorized)
  t.match(await json.json(), { openapi: '3.1.0', info, servers: [{ url: '/', description: 'The operations API of the instance serving this document.' }] }, 'the operations contract, naming the instance that serves it')
  const yaml = await fetch(`${base}/openapi.yaml`, authorized)
  t.match([yaml.headers.get('content-type'), await yaml.text()], [/yaml/, /operationId: createSandbox/])
  const docs = await fetch(`${base}/docs/`, authorized)
  t.match([docs.status, await docs.text()], [200, /swagger-ui/i], 'Swagger UI')
})

t.test('without OPS_TOKEN (on loopback) they are open, as its operations are', async (t) => {
  const opsPort = await freePort()
  await build(t, { OPS_PORT: String(opsPort) })
  const json = await fetch(`http://127.0.0.1:${opsPort}/openapi.json`)
  t.match([json.status, await json.json()], [200, { info: { title: info.title } }])
})
