// `npm test` runs each folder of unit tests as one process (scripts/test.ts generates a file per
// folder that calls runSuite), instead of one process per file. A tap process spends 4–7 s of
// CPU before its first test (tap's loader hooks, loading the service's modules, compiling the
// embedded database's WebAssembly, the first app build); with one per file that was most of the
// suite's time on two cores. Files with equal settings also share an app (sharedApp). Every
// file still runs on its own (`npm run test:file -- test/<folder>/<file>.test.ts`).
import { readdirSync } from 'node:fs'
import { join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'
import tap from 'tap'

/**
 * Imports the folder's test files one after another, in name order. Each registers its
 * tests on tap's root test when imported, and a file's top-level awaits (its app, its users)
 * finish before the next file is imported. The first test waits for all of them: tap ends a
 * root test that goes idle, which it would while a file builds its app, and the later files'
 * tests would be refused.
 */
export async function runSuite (folder: string): Promise<void> {
  const files = readdirSync(folder).filter((file) => file.endsWith('.test.js')).sort()
  let settle!: (error?: unknown) => void
  const loaded = new Promise<unknown>((resolve) => { settle = resolve })
  tap.test(`the suite loads the files of ${relative(process.cwd(), folder)}`, async (t) => {
    const error = await loaded
    if (error !== undefined) throw error
    t.pass(files.join(', '))
  })
  try {
    for (const file of files) await import(pathToFileURL(join(folder, file)).href)
    settle()
  } catch (error) {
    settle(error)
  }
}
