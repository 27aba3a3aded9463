import { readFileSync, readdirSync } from 'node:fs'
const file = readdirSync('tmp/prof')[0]
const prof = JSON.parse(readFileSync('tmp/prof/' + file))
const self = new Map(); const byId = new Map(prof.nodes.map(n => [n.id, n]))
const counts = new Map(); for (const s of prof.samples) counts.set(s, (counts.get(s) ?? 0) + 1)
let total = 0
for (const [id, c] of counts) { const n = byId.get(id); const cf = n.callFrame; const key = `${cf.functionName || '(anon)'} ${cf.url.split('/').slice(-2).join('/')}:${cf.lineNumber}`; self.set(key, (self.get(key) ?? 0) + c); total += c }
console.log([...self].sort((a, b) => b[1] - a[1]).slice(0, 35).map(([k, v]) => `${(100 * v / total).toFixed(1)}% ${k}`).join('\n'))
