// neostandard (standard's rules for ESLint 9, with TypeScript), as the Fastify organisation uses it.
import neostandard from 'neostandard'

export default [
  ...neostandard({ ts: true, ignores: ['generated/**', 'dist/**', 'clients/*/dist/**', 'clients/*/src/generated/**', 'bench-results/**', 'test-artifacts/**', '.tap/**'] }),
  // `void promise` marks a promise deliberately left to run on its own; as an expression it stays refused.
  { rules: { 'no-void': ['error', { allowAsStatement: true }] } }
]
