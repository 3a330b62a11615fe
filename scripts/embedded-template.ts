// Makes the embedded database's template (db/engine/embedded-template.ts) for this build: run by
// `npm run build` and by `npm start`'s build, it does nothing when the template is current.
// Initialised and migrated in a directory of its own, then put in place by a rename, so a run
// that stops half-way leaves no template that looks whole.
import { rename, rm } from 'node:fs/promises'
import { createDatabase } from '../db/engine/connect.js'
import { isCurrentTemplate, TEMPLATE_DIR, writeStamp } from '../db/engine/embedded-template.js'
import { migrateToLatest } from '../db/engine/migrate.js'

if (!isCurrentTemplate(TEMPLATE_DIR)) {
  const started = performance.now()
  const building = `${TEMPLATE_DIR}.building-${process.pid}`
  await rm(building, { recursive: true, force: true })
  // Not from a template: there is none of this code yet.
  const handle = createDatabase({ dataDir: building, template: false })
  try {
    await migrateToLatest(handle.db)
  } finally {
    await handle.close()
  }
  await writeStamp(building)
  await rm(TEMPLATE_DIR, { recursive: true, force: true })
  await rename(building, TEMPLATE_DIR)
  console.log(`embedded database template made in ${Math.round(performance.now() - started)} ms`)
}
