// The benchmark's baseline must serve the service's page with the service's serializer, or every ratio
// `npm run bench` prints is wrong (or, as once, the benchmark does not start at all).
import { spawn } from 'node:child_process'
import t from 'tap'
import { build } from './helper.js'

t.test('the bare-Fastify baseline serves the very page the service serves', async (t) => {
  const api = await build(t)
  const { accessToken } = await api.register()
  await api.createItem(accessToken, { name: 'A benchmark item', description: null })
  const page = (await api.call('listItems', { token: accessToken })).json()
  const baseline = spawn(process.execPath, [...process.execArgv, 'scripts/bench/baseline-server.ts'], {
    env: { ...process.env, BASELINE: 'bare', BASELINE_PAGE: JSON.stringify(page) },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { baseline.kill() })
  const url = await new Promise<string>((resolve, reject) => {
    let output = ''
    baseline.stdout.on('data', (chunk: Buffer) => {
      output += String(chunk)
      const match = /listening at (\S+)/.exec(output)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    baseline.once('exit', (code) => { reject(new Error(`the baseline exited with ${code}`)) })
  })
  t.same(await (await fetch(`${url}/v1/items`)).json(), page)
})
