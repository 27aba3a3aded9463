// The ports the suite hands out: each held by one living process, so that files run side by side, or suites, never
// start two servers on one.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { freePort, holdPort } from '../../harness/net.js'

const net = fileURLToPath(new URL('../../harness/net.js', import.meta.url))

// A process of its own that holds `port`, says so, and lives until killed.
async function holder (t: Test, port: number): Promise<{ kill: () => Promise<void> }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e',
    `const { holdPort } = await import(${JSON.stringify(net)}); console.log(holdPort(${port})); setInterval(() => {}, 1000)`],
  { stdio: ['ignore', 'pipe', 'inherit'] })
  const [said] = await once(child.stdout, 'data') as [Buffer]
  t.equal(said.toString().trim(), 'true', 'the other process holds it')
  return {
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = once(child, 'exit')
      child.kill('SIGKILL')
      await exited
    }
  }
}

t.test('a port another living process holds is not handed out; once that process is killed it is taken over', async (t) => {
  const port = await freePort()
  t.notOk(holdPort(port), 'this process holds what it handed out already')
  const other = 19_000 + Math.floor(Math.random() * 1_000)
  const first = await holder(t, other)
  t.teardown(first.kill)
  t.notOk(holdPort(other), 'held by a living process')
  await first.kill()
  t.ok(holdPort(other), 'its process killed, it is taken over')
  t.notOk(holdPort(other), 'and then held by this one')
})

t.test('a port a process held is given back when it ends', async (t) => {
  const port = 18_000 + Math.floor(Math.random() * 1_000)
  const child = spawn(process.execPath, ['--input-type=module', '-e', `const { holdPort } = await import(${JSON.stringify(net)}); holdPort(${port})`])
  await once(child, 'exit')
  t.ok(holdPort(port), 'free again for the next')
})
