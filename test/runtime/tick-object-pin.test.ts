// The pin must keep tick objects on one hidden class through a full garbage collection that runs while no other
// tick object is alive: the case that otherwise leaves process.nextTick megamorphic for good.
import { execFile } from 'node:child_process'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import { repositoryModule } from '../support/processes.js'

const run = promisify(execFile)

const check = `
const { pinnedTickObject } = await import(${JSON.stringify(pathToFileURL(repositoryModule('src/runtime/tick-object-pin')).href)})
const { createHook } = await import('node:async_hooks')
const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b)')
for (let tick = 0; tick < 10; tick += 1) await new Promise((resolve) => process.nextTick(resolve))
globalThis.gc()
let fresh
const hook = createHook({ init (id, type, trigger, resource) { if (type === 'TickObject') fresh ??= resource } }).enable()
process.nextTick(() => {})
hook.disable()
console.log(JSON.stringify({ pinned: typeof pinnedTickObject, sameMap: haveSameMap(pinnedTickObject, fresh) }))
`

t.test('a tick object made after a full garbage collection has the hidden class of the pinned one', async (t) => {
  const { stdout } = await run(process.execPath, [...process.execArgv, '--allow-natives-syntax', '--expose-gc', '--input-type=module', '--eval', check])
  t.same(JSON.parse(stdout), { pinned: 'object', sameMap: true })
})
