// Loaded into every process of a measured run (NODE_OPTIONS, by scripts/test-cost.ts): a test file's process, at its
// exit, appends to TEST_COST_FILE the CPU time it took with every child it waited for (servers, browsers, builds),
// read from /proc (Linux). Plain JavaScript: it loads before any TypeScript loader does.
import { appendFileSync, readFileSync } from 'node:fs'
import { relative } from 'node:path'

const out = process.env.TEST_COST_FILE
const file = process.argv[1]
// Linux reports these times in USER_HZ, which is 100 on every architecture.
const TICKS_PER_SECOND = 100

if (out !== undefined && file !== undefined && /\.test\.[jt]s$/.test(file)) {
  process.on('exit', () => {
    // /proc/self/stat's fields after the command's closing parenthesis start at the third: utime, stime, cutime
    // and cstime are the 14th to the 17th.
    const stat = readFileSync('/proc/self/stat', 'utf8')
    const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ')
    const ticks = fields.slice(11, 15).reduce((sum, field) => sum + Number(field), 0)
    appendFileSync(out, `${JSON.stringify({ file: relative(process.cwd(), file), cpuSeconds: ticks / TICKS_PER_SECOND })}\n`)
  })
}
