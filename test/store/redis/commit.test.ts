// A change is committed by the decoded commit or, for a shape of a few steps, as its own compiled script: the two
// must make the same change and answer the same, step by step, for every kind of step a rule uses.
import { Redis } from 'ioredis'
import t from 'tap'
import { connectRedisStore, scripts } from '../../../src/store/redis/connection.js'
import { writeDeadline } from '../../../src/store/redis/commands.js'
import { RedisClock } from '../../../src/store/redis/clock.js'
import { afterNow, Change, commit, type Held, PRESENT, type Refused, storeTime } from '../../../src/store/redis/commit.js'
import { compiledChange, compiledCommitScripts } from '../../../src/store/redis/compiled-commit.js'
import { redisKeys } from '../../../src/store/redis/keys.js'
import { RedisWrites } from '../../../src/store/redis/writes.js'
import { REDIS_URL } from '../../../harness/redis-keys.js'
import { COMMIT_FORMS, ownRedis, redisKeyPrefix, redisSkip, SILENT_LOGGER } from '../../support/redis.js'
import { retryUntil } from '../../support/wait.js'
import { user } from '../conformance/fixtures.js'

const skip = await redisSkip()
const AT = 4_102_444_800_000

// Each change of a prefix's keys, what it answers on keys as `prepare` left them.
const CHANGES: Readonly<Record<string, { change: (k: (name: string) => string) => Change, answer: Refused | Held, limitMax?: number }>> = {
  'every kind of step, made': {
    change: (k) => {
      const change = new Change().guard(k('hash'), 'held', 'value').guard(k('hash'), 'absent', null, 'taken').guard(k('hash'), 'held', PRESENT, 'gone').guardAsRead(k('hash'), 'held', 'value')
        .guardVacant(k('claim'))
        .count(k('counts'), 'rising', 2, 5, 'full').count(k('counts'), 'quota', 3, 10, 'quota', true).count(k('counts'), 'falling', -1, 5, 'full')
        .write('INCR', k('sequence'))
      return change.write('ZADD', k('order'), change.answerOfLast(), 'first').write('ZADD', k('copy'), { key: k('order'), member: 'first' }, 'first')
        .write('SET', k('claim'), 'made', 'PX', afterNow(60_000)).write('ZADD', k('times'), storeTime(AT), 'at').write('ZADD', k('times'), afterNow(0), 'now')
        .write('HSET', k('hash'), 'absent', 'now present', 'held', 'value')
        .event(k('outbox'), ['an id', 'items', '{"an":"event"}', '100'])
    },
    answer: 1,
    limitMax: 10
  },
  'a held value changed': { change: (k) => new Change().guard(k('hash'), 'held', 'other', 'changed').write('SET', k('written'), 'x'), answer: 'changed' },
  'a field changed since it was read, answered as it is': { change: (k) => new Change().guardAsRead(k('hash'), 'held', 'other').write('SET', k('written'), 'x'), answer: ['value'] },
  'a field gone since it was read, answered as none': { change: (k) => new Change().guardAsRead(k('hash'), 'absent', 'value').write('SET', k('written'), 'x'), answer: [null] },
  'a field that must be absent held': { change: (k) => new Change().guard(k('hash'), 'held', null, 'taken').write('SET', k('written'), 'x'), answer: 'taken' },
  'a field that must be present absent': { change: (k) => new Change().guard(k('hash'), 'absent', PRESENT, 'gone').write('SET', k('written'), 'x'), answer: 'gone' },
  'a string that must be vacant held, answered as it is': { change: (k) => new Change().guardVacant(k('claimed')).write('SET', k('written'), 'x'), answer: ['taken'] },
  'a count past its bound': { change: (k) => new Change().count(k('counts'), 'falling', 5, 5, 'full').write('SET', k('written'), 'x'), answer: 'full' },
  'a count past its bound once the limit counted': {
    change: (k) => new Change().count(k('counts'), 'falling', 5, 5, 'quota', true).write('SET', k('written'), 'x'),
    answer: 'quota',
    limitMax: 10
  },
  'a second count past its bound, the first taken back': {
    change: (k) => new Change().count(k('counts'), 'absent', 2, 5, 'full').count(k('counts'), 'falling', 5, 5, 'full').write('SET', k('written'), 'x'),
    answer: 'full'
  },
  'over the write limit': { change: (k) => new Change().count(k('counts'), 'falling', 1).write('SET', k('written'), 'x'), answer: -1, limitMax: 0 },
  'a count going down is not bounded': { change: (k) => new Change().count(k('counts'), 'falling', -1, 0, 'full'), answer: 1 }
}

// A score that is the commit's time (each form commits at its own): the same for both, however far apart they ran.
const asTime = (score: string): string => Math.abs(Number(score) - Date.now()) < 3_600_000 ? 'the commit\'s time' : score

// What a prefix's keys hold, a score that is the commit's time named so, streams without their entries' ids.
async function contents (redis: Redis, prefix: string): Promise<Record<string, unknown>> {
  const held: Record<string, unknown> = {}
  for (const key of (await redis.keys(`${prefix}*`)).sort()) {
    const type = await redis.type(key)
    const name = key.slice(prefix.length)
    if (type === 'string') held[name] = [await redis.get(key), await redis.pttl(key) > 0]
    else if (type === 'hash') held[name] = await redis.hgetall(key)
    else if (type === 'zset') held[name] = (await redis.zrange(key, '0', '-1', 'WITHSCORES')).map((value, index) => index % 2 === 1 ? asTime(value) : value)
    else held[name] = (await redis.xrange(key, '-', '+')).map(([, fields]) => fields)
  }
  return held
}

t.test('the decoded commit and a compiled one make the same change, and refuse it alike', { skip }, async (t) => {
  const redis = new Redis(REDIS_URL, { scripts })
  t.teardown(() => { redis.disconnect() })
  for (const [name, { change, answer, limitMax = -1 }] of Object.entries(CHANGES)) {
    const outcomes = await Promise.all(Object.entries(COMMIT_FORMS).map(async ([form, committed]) => {
      const prefix = `${redisKeyPrefix(t)}${form}:`
      const k = (key: string): string => `${prefix}${key}`
      await redis.multi().hset(k('hash'), 'held', 'value').set(k('claimed'), 'taken').hset(k('counts'), 'falling', '1').exec()
      const [time] = await redis.time()
      const deadline = writeDeadline(Number(time) * 1000 + 60_000, 0)
      const [reply, counted] = await committed(redis, change(k), k('limit'), deadline, k('outcome'), limitMax, 60_000)
      return { reply, counted: counted?.[0], held: await contents(redis, prefix) }
    }))
    const [decoded, compiled] = outcomes
    t.same(decoded!.reply, answer, `${name}: answered`)
    t.same(compiled, decoded, `${name}: the same answer, count and keys both ways`)
    if (answer !== 1) t.notOk('written' in decoded!.held, `${name}: nothing written`)
  }
})

t.test('a change whose command writes a key a count adds to, or that counts one field twice, is made by the decoded commit alone, which reads each count once and sets it after every command', { skip }, async (t) => {
  t.equal(compiledChange(new Change().count('counts', 'field', 1).count('counts', 'field', 2).parts), undefined)
  t.type(compiledChange(new Change().count('counts', 'field', 1).write('HDEL', 'other', 'field').parts), 'string')
  const redis = new Redis(REDIS_URL, { scripts })
  t.teardown(() => { redis.disconnect() })
  const clock = new RedisClock(redis)
  await clock.check()
  const keys = redisKeys(redisKeyPrefix(t))
  const counts = `${keys.capacity}counts`
  const change = new Change().count(counts, 'field', 1).write('HDEL', counts, 'field')
  t.equal(compiledChange(change.parts), undefined)
  t.equal(await commit(redis, new RedisWrites(redis, clock, keys.writeOutcome), keys, change), 1)
  t.equal(await redis.hget(counts, 'field'), '1', 'the count as read and added to, set after the command')
})

t.test('a compiled commit is sent whole the first time on each connection: a server that has not run it (a fresh one, one restarted, a new primary) never answers NOSCRIPT, which would have it sent again behind the WAIT that counts its replicas', { skip }, async (t) => {
  const own = await ownRedis(t)
  const store = await connectRedisStore({ url: own.url, keyPrefix: 'commits:', logger: SILENT_LOGGER, maxItemsPerContributor: 1 })
  t.teardown(store.close)
  const errors = async (): Promise<string> => {
    const asking = new Redis(own.url)
    try {
      return await asking.info('errorstats')
    } finally {
      asking.disconnect()
    }
  }
  t.ok(await store.users.add(user()), 'a registration, committed by its compiled script')
  t.ok(await store.users.add(user()), 'and another, of the same shape')
  t.notMatch(await errors(), /NOSCRIPT/, 'no NOSCRIPT from the server that ran it first')
  await own.stop()
  await own.start()
  await retryUntil('a registration once Redis is back', async () => await store.users.add(user()).catch(() => undefined), (added) => added !== undefined)
  t.notMatch(await errors(), /NOSCRIPT/, 'nor from the server started again, which had never run it')
  const raw = new Redis(own.url)
  t.teardown(() => { raw.disconnect() })
  await raw.script('FLUSH')
  t.ok(await store.users.add(user()), 'scripts flushed under a connection that sent it: sent whole again')
  t.match(await errors(), /errorstat_NOSCRIPT:count=1/, 'after the one NOSCRIPT')
})

t.test('a process compiles at most 256 shapes, and Redis keeps no more of them: past them, a change is made by the decoded commit', { skip }, async (t) => {
  const own = await ownRedis(t)
  const redis = new Redis(own.url, { scripts })
  t.teardown(() => { redis.disconnect() })
  const clock = new RedisClock(redis)
  await clock.check()
  const keys = redisKeys('shapes:')
  const writes = new RedisWrites(redis, clock, keys.writeOutcome)
  // Each a shape of its own: its guard's refusal is written into its script.
  for (let shape = 0; shape < 300; shape += 1) {
    t.equal(await commit(redis, writes, keys, new Change().guard(keys.users, 'nobody', null, `refused ${shape}`).write('SET', `shapes:made:${shape}`, 'x')), 1)
  }
  t.equal(await redis.dbsize(), 300 + 300, 'each made, its reply recorded')
  t.ok([...compiledCommitScripts()].length <= 256, 'at most 256 compiled')
  const cached = Number(/number_of_cached_scripts:(\d+)/.exec(await redis.info('memory'))?.[1])
  t.ok(cached <= 256 + 1, `${cached} scripts in Redis: at most the compiled ones and the decoded commit`)
})
