// `npm test` runs the unit files in a few processes instead of one each. A tap process
// spends 4–7 s of CPU before its first test (tap's loader hooks, loading the service's
// modules, the first app build); with one per file that was most of the suite's time on
// two cores. Each suite below is one process that imports its files in turn; every file
// still runs on its own (`npm run test:file -- test/tasks.test.ts`).
//
// The suites are balanced by CPU (not by theme), so that they end together: files that share
// an app's settings go together (they share the app: sharedApp). A file not named here runs
// in the last suite, `rest`: a new test file is never skipped.
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import tap from 'tap'
import { ROOT } from './paths.js'

export const SUITES = {
  accounts: ['auth', 'account', 'http', 'hardening', 'rate-limits', 'shedding'],
  tasks: ['tasks', 'task-pages', 'user-turns', 'preferences', 'openapi', 'properties', 'timestamps', 'db', 'config', 'logging', 'transport'],
  billing: ['billing', 'billing-order', 'billing-one-subscription', 'origin-client', 'metrics', 'login-timing', 'forgot-timing'],
  // The embedded database's own tests mostly wait on it (slow queries, a fresh directory's initdb).
  rest: ['embedded-database', 'email', 'billing-events', 'billing-rules']
} satisfies Record<string, string[]>

export type SuiteName = keyof typeof SUITES

const testDir = join(ROOT, 'test')
const extension = import.meta.url.slice(import.meta.url.lastIndexOf('.'))

/** The unit test files by the name before `.test`, as they are on disk. */
function testFiles (): string[] {
  return readdirSync(testDir).filter((file) => file.endsWith(`.test${extension}`)).map((file) => file.slice(0, -`.test${extension}`.length))
}

/** The files of a suite: its list, and for `rest` also every file no suite names. */
export function suiteFiles (suite: SuiteName): string[] {
  const named = new Set(Object.values(SUITES).flat())
  const files = testFiles()
  for (const name of SUITES[suite]) {
    if (!files.includes(name)) throw new Error(`test/suites.ts names ${name}, which is not a test file`)
  }
  return suite === 'rest' ? [...SUITES.rest, ...files.filter((name) => !named.has(name))] : SUITES[suite]
}

/**
 * Imports the suite's files one after another. Each registers its tests on tap's root test
 * when imported, and a file's top-level awaits (its app, its users) finish before the next
 * file is imported. The first test waits for all of them: tap ends a root test that goes
 * idle, which it would while a file builds its app, and the later files' tests would be
 * refused.
 */
export async function runSuite (suite: SuiteName): Promise<void> {
  const files = suiteFiles(suite)
  let settle!: (error?: unknown) => void
  const loaded = new Promise<unknown>((resolve) => { settle = resolve })
  tap.test(`the ${suite} suite loads its files`, async (t) => {
    const error = await loaded
    if (error !== undefined) throw error
    t.pass(files.join(', '))
  })
  try {
    for (const name of files) await import(pathToFileURL(join(testDir, `${name}.test${extension}`)).href)
    settle()
  } catch (error) {
    settle(error)
  }
}
