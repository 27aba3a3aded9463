// The sizing rule on figures worked by hand: what the bounds let a store keep at worst, against its budget.
import t from 'tap'
import { sizing, type StoreCosts } from '../../src/domain/sizing.js'

const COSTS: StoreCosts = { perQuotaByte: 2, perAccount: 100, perKey: 10, perSession: 50, perTokenHash: 5, perRateLimitKey: 4, perEventByte: 3 }
const BOUNDS = {
  accounts: { accounts: 10, quotaBytes: 1000 },
  keysPerAccount: 3,
  sessionsPerAccount: 2,
  tokenHashesPerSession: 4,
  sandboxes: undefined,
  rateLimitKeys: 100,
  deliveryBytes: 50
}

t.test('an account at its worst: its user, its quota, its keys, its sessions with every token hash they remember', async (t) => {
  // 100 + 1000 × 2 + 3 × 10 + 2 × (50 + 4 × 5) = 2 270; ten of them, the counters (400) and the deliveries (150).
  t.same(sizing(BOUNDS, COSTS, 23_250), { accountBytes: 2270, sandboxBytes: 0, neededBytes: 23_250, budgetBytes: 23_250, fits: true, accountsThatFit: 10 })
  t.match(sizing(BOUNDS, COSTS, 23_249), { fits: false, accountsThatFit: 9 }, 'a byte short: one account fewer fits')
  t.match(sizing(BOUNDS, COSTS, undefined), { fits: true, accountsThatFit: Infinity }, 'nothing bounds the store: nothing to check')
  t.match(sizing(BOUNDS, COSTS, 100), { fits: false, accountsThatFit: 0 }, 'not even the counters fit')
})

t.test('a sandbox at its worst: its accounts, its events and its counters, each sandbox the limit allows', async (t) => {
  const withSandboxes = { ...BOUNDS, sandboxes: { limit: 5, accounts: 2, eventBytes: 100, rateLimitKeys: 10 } }
  // 2 × 2 270 + 100 × 3 + 10 × 4 = 4 880, five of them beside the service's 23 250.
  t.match(sizing(withSandboxes, COSTS, 50_000), { sandboxBytes: 4880, neededBytes: 23_250 + 5 * 4880, fits: true })
  t.match(sizing(withSandboxes, COSTS, 40_000), { fits: false, accountsThatFit: Math.floor((40_000 - 5 * 4880 - 550) / 2270) }, 'the sandboxes count before the accounts')
})
