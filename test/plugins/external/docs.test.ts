// The headers of the pages a browser loads (src/plugins/external/docs.ts): what Swagger UI needs over plain HTTP, and
// HSTS only over TLS. docs-browser.release.test.ts drives the pages themselves in Chromium.
import t from 'tap'
import { buildTestApp } from '../../support/app.js'

t.test('/docs over plain HTTP carries neither HSTS nor upgrade-insecure-requests; over TLS, by a trusted proxy\'s X-Forwarded-Proto, HSTS', async (t) => {
  const app = await buildTestApp(t, { TRUST_PROXY: '127.0.0.1' })
  for (const url of ['/docs/', '/openapi.json']) {
    const plain = await app.inject({ method: 'GET', url })
    t.equal(plain.headers['strict-transport-security'], undefined, `${url}: no HSTS over HTTP`)
    t.notMatch(String(plain.headers['content-security-policy']), /upgrade-insecure-requests/, `${url}: no upgrade of the page's requests`)
    const overTls = await app.inject({ method: 'GET', url, headers: { 'x-forwarded-proto': 'https' } })
    t.equal(overTls.headers['strict-transport-security'], 'max-age=31536000; includeSubDomains', `${url}: HSTS over TLS`)
  }
  const untrusted = await buildTestApp(t)
  const claimed = await untrusted.inject({ method: 'GET', url: '/docs/', headers: { 'x-forwarded-proto': 'https' } })
  t.equal(claimed.headers['strict-transport-security'], undefined, 'not on the word of a client no proxy setting trusts')
})
