import neostandard from 'neostandard'

export default [
  ...neostandard({
    ts: true,
    ignores: ['dist/**', 'node_modules/**', '.tap/**', '.data/**', 'coverage/**', 'examples/api-types.ts']
  }),
  {
    // TypeBox's idiom names a schema and its Static type alike; tsc already rejects real redeclarations.
    rules: { '@typescript-eslint/no-redeclare': 'off' }
  }
]
