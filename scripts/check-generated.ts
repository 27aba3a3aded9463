// Fails when generated/ is not exactly what `npm run generate` would write from openapi.yaml.
import { findDrift } from './generate.js'

const drift = await findDrift()
if (drift.length > 0) {
  console.error(`generated/ is out of date with openapi.yaml (run npm run generate):\n${drift.map((line) => `  ${line}`).join('\n')}`)
  process.exit(1)
}
console.log('generated/ matches openapi.yaml')
