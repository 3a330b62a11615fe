// Makes an embedded database template (db/engine/embedded-template.ts): the build's, for fresh
// DATA_DIRs (scripts/embedded-template.ts), and the test suite's, that each test app copies
// (test/support/setup.ts). Initialised and migrated in a directory of its own, stamped, then
// put in place by a rename, so a run that stops half-way leaves no template that looks whole.
import { rename, rm } from 'node:fs/promises'
import { createDatabase } from './connect.js'
import { isCurrentTemplate, writeStamp } from './embedded-template.js'
import { migrateToLatest } from './migrate.js'

/** Makes the template in `dir` unless one of this code is there; answers whether it did. */
export async function makeTemplate (dir: string): Promise<boolean> {
  if (isCurrentTemplate(dir)) return false
  const building = `${dir}.building-${process.pid}`
  await rm(building, { recursive: true, force: true })
  try {
    // Not from a template: there is none of this code yet.
    const handle = createDatabase({ dataDir: building, template: false })
    try {
      await migrateToLatest(handle.db)
    } finally {
      await handle.close()
    }
    await writeStamp(building)
    // Another run that finished first (tests started together) made the same template: keep it.
    if (isCurrentTemplate(dir)) return false
    await rm(dir, { recursive: true, force: true })
    await rename(building, dir)
    return true
  } finally {
    await rm(building, { recursive: true, force: true })
  }
}
