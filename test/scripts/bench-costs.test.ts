// The sizing rule (src/domain/sizing.ts) is only as true as the cost it takes for each thing a store holds: `npm run
// bench:costs` measures each on a store and exits 1 when one passes the rule's, which would let a store it said fits
// outgrow its budget.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { repositoryModule } from '../support/processes.js'
import { ownRedis, redisSkip } from '../support/redis.js'

const run = promisify(execFile)

for (const store of ['memory', 'redis'] as const) {
  t.test(`on the ${store} store, each thing the sizing rule counts costs at most what the rule takes for it`, { skip: store === 'redis' && await redisSkip() }, async (t) => {
    // A Redis of its own: the shared one's used_memory moves with every test that runs beside this one.
    const redis = store === 'redis' ? { REDIS_URL: (await ownRedis(t)).url } : {}
    const { stdout } = await run(process.execPath, ['--expose-gc', ...process.execArgv, repositoryModule('scripts/bench/costs')], {
      env: { ...process.env, BENCH_STORE: store, BENCH_COSTS_COUNT: '10000', ...redis }
    })
    const rows = stdout.split('\n').filter((line) => /^\| per/.test(line))
    t.equal(rows.length, 5, 'a row for each cost')
    for (const row of rows) t.match(row, /\| yes \|$/, row)
  })
}
