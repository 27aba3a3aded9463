// The README's "Try it" walkthrough, run verbatim with bash against a started service: the README cannot drift.
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import t from 'tap'
import { start } from './support/processes.js'

const run = promisify(execFile)

t.test('the README\'s "Try it" walkthrough runs as written', async (t) => {
  const readme = readFileSync('README.md', 'utf8')
  const section = readme.slice(readme.indexOf('## Try it'))
  const script = /```sh\n([\s\S]*?)```/.exec(section)?.[1]
  t.ok(script, 'the walkthrough is there')
  const server = await start({ STORE: 'memory' })
  t.teardown(() => { server.process.kill('SIGKILL') })
  const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script ?? 'false'], { env: { ...process.env, BASE: server.url } })
  t.match(stdout, /"email":"ada@example\.com"/, 'registered')
  t.match(stdout, /^etag: "[^"]+"\r?\n\{"id":"[0-9a-f-]{36}","name":"Difference engine"/im, 'read by id, with its ETag')
  t.match(stdout, /"pagination":\{"page":1,"pageSize":20,"total":1\}/, 'listed')
  t.match(stdout, /"status":"archived"/, 'archived')
  t.match(stdout, /removed: 204\n/)
  t.match(stdout, /signed out: 204\n/)
})
