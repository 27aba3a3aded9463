// API consumers meet the service through Swagger UI: drive /docs in headless Chromium (Debian's package, with
// playwright-core) the way a person would. Without Chromium the test is skipped, except under CI=true.
import { existsSync, readFileSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { chromium } from 'playwright-core'
import t from 'tap'
import { routes } from '../../../generated/routes.js'
import { start } from '../../support/processes.js'
import { buildTestApp } from '../../support/app.js'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const SCREENSHOT = 'test-artifacts/swagger-ui.png'

const skip = existsSync(CHROMIUM) || process.env.CI === 'true'
  ? false
  : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`

t.test('Swagger UI at /docs shows every operation, authorizes with a token that survives a reload, and runs every operation with what it fills in', { skip }, async (t) => {
  // The built server as `npm start` runs it, started from an environment, with sandboxes on.
  const server = await start({ SANDBOXES: 'on', OPS_PORT: '0' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const baseUrl = server.url
  const ops = server.opsUrl ?? ''
  // As after the README's Try it: its user is registered, and is the one signed in here.
  const readme = readFileSync('README.md', 'utf8')
  const readmeUser = JSON.parse(/"\$BASE\/v1\/auth\/register" -w '\\n' -d '([^']+)'/.exec(readme)?.[1] ?? 'null') as { email: string, password: string }
  await fetch(`${baseUrl}/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(readmeUser) })
  const login = await fetch(`${baseUrl}/v1/auth/login`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: readmeUser.email, password: readmeUser.password })
  })
  const { accessToken } = await login.json() as { accessToken: string }

  // Playwright starts it with a fresh profile. As root in a sandbox with no network but loopback: no sandbox,
  // no GPU, no background traffic.
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync']
  })
  t.teardown(async () => { await browser.close() })
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } })
  const refusals: string[] = []
  page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) refusals.push(message.text()) })
  await page.goto(`${baseUrl}/docs/`)

  const tagOf = (route: (typeof routes)[number]): string => route.url === '/' ? 'docs' : route.url.startsWith('/health') ? 'ops' : route.url.startsWith('/v1/auth') ? 'auth' : 'items'
  const shown = routes.filter((route) => tagOf(route) !== 'docs')
  for (const route of shown) {
    await page.locator(`#operations-${tagOf(route)}-${route.operationId}`).waitFor()
    t.pass(`${route.operationId} is listed under ${tagOf(route)}`)
  }
  t.equal(await page.locator('#operations-tag-docs').isVisible(), false, 'the redirect to this page (the docs tag) is not shown: Try it out could only lead back here')

  // An operation reads in a screen or two: its error responses and headers folded, one click opening each.
  const viewportHeight = 900
  for (const route of shown) {
    const operation = page.locator(`[id$="-${route.operationId}"]`).first()
    await operation.locator('.opblock-summary').click()
    await operation.locator('.responses-wrapper').waitFor()
    const height = (await operation.boundingBox())?.height ?? Infinity
    t.ok(height <= 2 * viewportHeight, `${route.operationId} opened is at most two screens high (${Math.round(height)} px)`)
    await operation.locator('.opblock-summary').click()
  }
  const createItem = page.locator('#operations-items-createItem')
  await createItem.locator('.opblock-summary').click()
  const reused = createItem.locator('.folded-error[data-code="422"]')
  t.equal(await reused.locator('.highlight-code').isVisible(), false, 'an error response is folded to its status and description')
  await reused.locator('summary').first().click()
  t.match(await reused.locator('.highlight-code').innerText(), /"code": "IDEMPOTENCY_KEY_REUSED"/, 'and a click opens it, its example shown')
  await mkdir('test-artifacts', { recursive: true })
  await createItem.screenshot({ path: 'test-artifacts/swagger-ui-create-item.png' })
  await createItem.locator('.opblock-summary').click()

  t.equal(await page.title(), 'Items Service', 'the page is named by the contract\'s title')
  t.match(await page.locator('.information-container .title').innerText(), /^Items Service/)
  t.equal(await page.locator('.topbar').count(), 0, 'no top bar: neither Swagger\'s logo nor a box that loads another document')
  const create = page.locator('#operations-items-createItem')
  await create.locator('.opblock-summary').click()
  t.match(await create.locator('.opblock-section-request-body .highlight-code').innerText(), /"name": "Difference engine"/, 'a body shows its example')
  await create.locator('.opblock-summary').click()

  // The events' schemas (allOf the envelope and their channel) are listed as objects, and opened, show the
  // envelope's fields once Swagger UI has resolved them (until then it lists the allOf as "(any & object)").
  for (const event of ['ItemAddedEvent', 'ItemEditedEvent', 'ItemRemovedEvent']) {
    const model = page.locator('section.models .json-schema-2020-12').filter({ hasText: event }).first()
    t.match(await model.innerText(), new RegExp(`^${event}\\s*Expand all\\s*object\\b`), `${event} is listed as an object`)
    await model.locator('button.json-schema-2020-12-accordion').first().click()
    await model.getByText('specversion', { exact: true }).waitFor()
    t.match(await model.innerText(), new RegExp(`^${event}\\s*Collapse all\\s*object\\n[\\s\\S]*specversion[\\s\\S]*data[\\s\\S]*type`), `${event} shows its fields`)
  }

  // Runs an operation with what Swagger UI fills in, and `itemId` typed in where the path has one.
  const tryItOut = async (operationId: string, tag: string, itemId?: string): Promise<string> => {
    const operation = page.locator(`#operations-${tag}-${operationId}`)
    const tryOut = operation.locator('.try-out__btn')
    // Swagger UI may render again while it starts (it did after a reload, on a busy machine) and fold an operation
    // opened too early: it is opened until it stays open.
    for (let attempt = 1; !await tryOut.isVisible(); attempt += 1) {
      if (attempt > 5) throw new Error(`${operationId} does not stay open`)
      if (!await operation.evaluate((element) => element.classList.contains('is-open'))) await operation.locator('.opblock-summary').click()
      await tryOut.waitFor({ timeout: 2000 }).catch(() => undefined)
    }
    // Once tried out, an operation stays so (its button says Cancel) until it is cancelled.
    if (!await tryOut.evaluate((element) => element.classList.contains('cancel'))) await tryOut.click()
    for (const optional of ['If-Match', 'If-None-Match', 'Idempotency-Key', 'contributorId', 'status']) {
      const input = operation.locator(`tr[data-param-name="${optional}"] input`)
      if (await input.count() > 0) t.equal(await input.inputValue(), '', `${operationId}: ${optional} is not filled in`)
    }
    if (itemId !== undefined) await operation.locator('tr[data-param-name="itemId"] input').fill(itemId)
    // The answer of an earlier run is cleared first, so that the one read is this run's.
    const cleared = operation.locator('.btn-clear')
    if (await cleared.count() > 0) await cleared.click()
    const answered = operation.locator('.live-responses-table .response .response-col_status').first()
    await answered.waitFor({ state: 'detached' })
    await operation.locator('.execute').click()
    await answered.waitFor()
    return (await answered.innerText()).trim()
  }
  // Before Authorize, with the examples the UI fills in, after the README's Try it: none collides with its user.
  t.equal(await tryItOut('registerUser', 'auth'), '201', 'Try it out on registerUser, with the example body')
  t.equal(await tryItOut('loginUser', 'auth'), '200', 'Try it out on loginUser, with the example body: the example user\'s sign-in')
  t.equal(await tryItOut('refreshTokens', 'auth'), '401', 'Try it out on refreshTokens: the example token is no real one, and is refused as the contract says')
  t.equal(await tryItOut('checkLiveness', 'ops'), '200', 'Try it out on checkLiveness')
  t.equal(await tryItOut('checkReadiness', 'ops'), '200', 'Try it out on checkReadiness')

  await page.locator('.auth-wrapper .authorize').click()
  await page.locator('.modal-ux input[type=text], .modal-ux input[type=password]').first().fill(accessToken)
  await page.locator('.modal-ux .auth-btn-wrapper .authorize').click()
  await page.locator('.modal-ux .auth-btn-wrapper .btn-done').click()

  t.equal(await tryItOut('listItems', 'items'), '200', 'Try it out on listItems')
  t.equal(await tryItOut('createItem', 'items'), '201', 'Try it out on createItem, with the example body')
  const listed = await (await fetch(`${baseUrl}/v1/items`, { headers: { authorization: `Bearer ${accessToken}` } })).json() as { pagination: { total: number }, data: Array<{ id: string }> }
  t.equal(listed.pagination.total, 1, 'the item created from Swagger UI is in the catalogue')
  const [created] = listed.data
  t.equal(await tryItOut('listItems', 'items'), '200', 'listItems again, its filters left empty')
  t.match(await page.locator('#operations-items-listItems .live-responses-table .response .response-col_description').first().innerText(), /"total": 1/, 'and it lists the item')
  t.equal(await tryItOut('getItem', 'items', created!.id), '200', 'Try it out on getItem, the id typed in')
  t.equal(await tryItOut('updateItem', 'items', created!.id), '200', 'Try it out on updateItem, with the example body')
  await mkdir('test-artifacts', { recursive: true })
  await page.locator('#operations-items-updateItem').screenshot({ path: 'test-artifacts/swagger-ui-update-item.png' })
  t.equal(await tryItOut('deleteItem', 'items', created!.id), '204', 'Try it out on deleteItem')

  // The authorization survives a reload (persistAuthorization): a request right after it still gets a 200.
  await page.reload({ waitUntil: 'networkidle' })
  t.equal(await tryItOut('listItems', 'items'), '200', 'still authorized after a reload')

  // The sandbox server, chosen in the servers list with a sandbox's id: a request goes to the sandbox's catalogue.
  const made = await fetch(`${ops}/sandboxes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  const sandbox = await made.json() as { id: string }
  await page.locator('.servers select').first().selectOption('/sandboxes/{sandboxId}')
  await page.locator('.servers input').first().fill(sandbox.id)
  t.equal(await tryItOut('registerUser', 'auth'), '201', 'on the sandbox server, the example user registers in the sandbox (its own catalogue)')
  const events = await fetch(`${ops}/sandboxes/${sandbox.id}/events`)
  t.equal(events.status, 200, 'the sandbox the UI called exists')
  const inSandbox = await fetch(`${baseUrl}/sandboxes/${sandbox.id}/v1/auth/login`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'grace@example.com', password: 'correct horse battery staple' })
  })
  t.equal(inSandbox.status, 200, 'and the user it registered signs in there')
  await page.locator('.servers select').first().selectOption('/')

  t.equal(await tryItOut('logoutUser', 'auth'), '204', 'Try it out on logoutUser, last: it ends the session the UI was authorized with')
  t.same(refusals, [], 'the Content Security Policy of /docs blocks nothing Swagger UI needs')

  await mkdir('test-artifacts', { recursive: true })
  await page.screenshot({ path: SCREENSHOT, fullPage: true })
  t.comment(`screenshot saved to ${SCREENSHOT}`)
})

t.test('Swagger UI renders every operation for a browser that reaches the service by a name that is not loopback, over plain HTTP', { skip }, async (t) => {
  const app = await buildTestApp(t)
  const { port } = new URL(await app.listen({ host: '127.0.0.1', port: 0 }))
  // docs.test is 127.0.0.1 to this browser, and, unlike localhost, not a secure context: what a page served by a
  // container on 0.0.0.0 meets when reached by its host's name.
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP docs.test 127.0.0.1']
  })
  t.teardown(async () => { await browser.close() })
  const page = await browser.newPage()
  const failed: string[] = []
  page.on('requestfailed', (request) => { failed.push(request.url()) })
  await page.goto(`http://docs.test:${port}/docs/`)
  // Rendered, shown or not: the redirect to the docs is rendered hidden.
  for (const route of routes) await page.locator(`[id$="-${route.operationId}"]`).first().waitFor({ state: 'attached', timeout: 30_000 })
  t.pass(`all ${routes.length} operations rendered`)
  t.same(failed, [], 'no request of the page failed (none was upgraded to HTTPS, which the service does not serve)')
})
