// The suite's Redis probe (test/support/redis.ts): a Redis that answers late, or starts late where one is required, is
// waited for; only one that is not there skips its tests.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../../harness/net.js'
import { ownRedis, redisProblem } from '../../support/redis.js'

const hasRedisServer = await import('node:child_process').then(({ spawnSync }) => spawnSync('redis-server', ['--version']).status === 0)
const skip = hasRedisServer ? false : 'redis-server is not installed'
if (skip !== false && process.env.CI === 'true') throw new Error('CI=true needs redis-server')

t.test('a required Redis that starts listening after the probe began is waited for, not reported absent', { skip }, async (t) => {
  const redis = await ownRedis(t)
  await redis.stop()
  const probing = redisProblem(redis.url, { awaitStart: true })
  await sleep(1500)
  await redis.start()
  t.equal(await probing, undefined)
})

t.test('a Redis that answers late is waited for: a slow answer is no absence', { skip }, async (t) => {
  const redis = await ownRedis(t)
  redis.signal('SIGSTOP')
  const probing = redisProblem(redis.url, { awaitStart: false })
  await sleep(1500)
  redis.signal('SIGCONT')
  t.equal(await probing, undefined)
})

t.test('where Redis is optional, nothing listening is reported at once, with the reason', async (t) => {
  const started = Date.now()
  t.match(await redisProblem(`redis://127.0.0.1:${await freePort()}`, { awaitStart: false }), /ECONNREFUSED/)
  t.ok(Date.now() - started < 30_000, 'without waiting out the patience')
})
