// Browser clients on other origins: CORS is off unless CORS_ORIGINS lists them. The browser part runs in headless
// Chromium (Debian's package, with playwright-core); without Chromium it is skipped, except under CI=true.
import { existsSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { chromium } from 'playwright-core'
import t, { type Test } from 'tap'
import { newUser } from '../../support/api.js'
import { build, buildTestApp } from '../../support/app.js'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const APP_ORIGIN = 'http://localhost:5173'

const preflight = (origin: string): { method: 'OPTIONS', url: string, headers: Record<string, string> } => ({
  method: 'OPTIONS',
  url: '/v1/items',
  headers: { origin, 'access-control-request-method': 'PATCH', 'access-control-request-headers': 'authorization, content-type, if-match' }
})

t.test('off by default: a preflight finds no route', async (t) => {
  const api = await build(t)
  const response = await api.inject(preflight(APP_ORIGIN))
  t.equal(response.statusCode, 404)
  t.equal(response.headers['access-control-allow-origin'], undefined)
})

t.test('a malformed preflight is a 400 in the contract\'s ValidationErrorResponse shape, naming what it lacks', async (t) => {
  const api = await build(t, { CORS_ORIGINS: APP_ORIGIN })
  const response = await api.app.inject({ method: 'OPTIONS', url: '/v1/items', headers: { origin: APP_ORIGIN } })
  t.equal(response.statusCode, 400)
  t.match(response.headers['content-type'], /^application\/json/)
  t.same(response.json(), {
    code: 'VALIDATION_ERROR',
    message: 'The request is invalid.',
    details: [{ field: 'headers.access-control-request-method', issue: 'is required in a CORS preflight' }]
  })
})

t.test('CORS_ORIGINS: preflights from a listed origin answer 204, and responses expose the headers clients read', async (t) => {
  const api = await build(t, { CORS_ORIGINS: `${APP_ORIGIN},https://app.example.com` })
  const allowed = await api.app.inject(preflight(APP_ORIGIN))
  t.equal(allowed.statusCode, 204)
  t.match(allowed.headers, {
    'access-control-allow-origin': APP_ORIGIN,
    'access-control-allow-methods': /PATCH/,
    'access-control-allow-headers': /authorization.*idempotency-key.*if-match/,
    'access-control-max-age': '600'
  })
  const refused = await api.app.inject(preflight('http://evil.example'))
  t.equal(refused.headers['access-control-allow-origin'], undefined, 'an origin not listed is not allowed')

  const { accessToken } = await api.register()
  const created = await api.call('createItem', { token: accessToken, body: { name: 'n' }, headers: { origin: APP_ORIGIN } })
  t.equal(created.headers['access-control-allow-origin'], APP_ORIGIN)
  t.match(created.headers['access-control-expose-headers'], /x-request-id.*location.*etag.*idempotent-replayed.*retry-after.*ratelimit.*ratelimit-policy/)
})

/** A page server on a port of its own, so an origin of its own; it serves what `html` gives at the time. */
async function servePage (t: Test, html: () => string): Promise<string> {
  const server = createServer((_request, response) => { response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html()) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.close() })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

t.test('in a browser, a page on a listed origin reads a list from the API on another origin; an unlisted one cannot',
  { skip: existsSync(CHROMIUM) || process.env.CI === 'true' ? false : `no Chromium at ${CHROMIUM}` }, async (t) => {
    let client = ''
    const listed = await servePage(t, () => client)
    const unlisted = await servePage(t, () => client)
    const app = await buildTestApp(t, { CORS_ORIGINS: listed })
    const apiUrl = await app.listen({ host: '127.0.0.1', port: 0 })
    const registered = await fetch(`${apiUrl}/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(newUser()) })
    const { accessToken } = await registered.json() as { accessToken: string }
    await fetch(`${apiUrl}/v1/items`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${accessToken}` }, body: '{"name":"seen from the browser"}' })
    // The Authorization header makes the browser send a preflight first.
    client = `<!doctype html><title>client</title><pre id="out">pending</pre><script>
fetch('${apiUrl}/v1/items?pageSize=5', { headers: { authorization: 'Bearer ${accessToken}' } })
  .then(async (response) => { document.getElementById('out').textContent = JSON.stringify({ status: response.status, requestId: response.headers.get('x-request-id'), body: await response.json() }) })
  .catch((error) => { document.getElementById('out').textContent = 'blocked: ' + error.name })
</script>`

    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync']
    })
    t.teardown(async () => { await browser.close() })
    const tab = await browser.newPage()
    const read = async (origin: string): Promise<string> => {
      await tab.goto(origin)
      await tab.waitForFunction('document.getElementById("out").textContent !== "pending"')
      return await tab.locator('#out').textContent() ?? ''
    }
    t.match(JSON.parse(await read(listed)), {
      status: 200,
      requestId: /^[0-9a-f-]{36}$/,
      body: { data: [{ name: 'seen from the browser' }], pagination: { total: 1 } }
    }, 'the listed origin reads the list, and the exposed x-request-id')
    t.equal(await read(unlisted), 'blocked: TypeError', 'the browser blocks an origin not listed')
  })
