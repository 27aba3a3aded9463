// The authentication step's wiring: every security scheme an operation names has its hook, or the start fails.
// What each scheme accepts and refuses is tested through HTTP (test/handlers/auth.test.ts, the operations API's tests).
import t from 'tap'

t.test('a security scheme of the contract that no hook enforces stops the start, naming the operation', async (t) => {
  const { authentication } = await import('../../src/pipeline/authentication.js')
  const { routes } = await import('../../generated/routes.js')
  const stepFor = authentication({ apiKey: (_request, _reply, done) => { done() } })
  t.throws(() => routes.map(stepFor), { message: /^logoutUser: no hook enforces the security scheme\(s\) bearerAuth of the contract$/ }, 'the first operation under bearerAuth')
  t.equal(stepFor({ ...routes[0]!, security: [] }), undefined, 'an operation open to anyone runs no authentication')
  t.throws(() => stepFor({ ...routes[0]!, security: ['apiKey', 'bearerAuth'] }), { message: /no hook enforces the security scheme\(s\) apiKey, bearerAuth/ }, 'nor is a choice of schemes let through')
})
