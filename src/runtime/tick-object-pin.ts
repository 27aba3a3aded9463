// Imported first by app.ts, so before anything else loads in the server and in an embedder alike. It keeps one of
// Node's tick objects (what `process.nextTick` queues) alive for the life of the process, which keeps a Node/V8
// behaviour from slowing every request down for good. Seen on Node 20.20 and 22; no Node release fixes it, so it
// applies on every version. Not yet reported upstream (this project's machines reach no issue tracker): the report
// to file at github.com/nodejs/node is written out in docs/performance.md, "Decisions, measured".
//
// `process.nextTick` builds each tick object with one literal, `{ [async_id_symbol], [trigger_async_id_symbol],
// callback, args }`, whose property stores remember the hidden classes they add. Those hidden classes are held
// weakly: when a full garbage collection runs while no tick object is alive (which happens at random while a
// large program loads), V8 drops them, the next tick object gets new ones, and the stores go megamorphic for the
// rest of the process. Each of the `nextTick`s of a request then makes three runtime calls (docs/performance.md has
// the measurements). A tick object that stays alive keeps its hidden classes alive, and with them the stores' fast
// path.
import { createHook } from 'node:async_hooks'

let tickObject: object | undefined
const hook = createHook({
  init (_asyncId, type, _triggerAsyncId, resource: object) {
    if (type === 'TickObject') tickObject ??= resource
  }
}).enable()
process.nextTick(() => {})
hook.disable()

/** The tick object kept alive; exported so that it stays reachable, and so that a test can look at it. */
export const pinnedTickObject = tickObject
