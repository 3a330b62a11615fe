// Runs once before the test files (tap's `before`): builds a migrated embedded
// database that each test file copies, so no file pays for migrations on PGlite.
import { rm } from 'node:fs/promises'
import { createDatabase } from '../db/connect.js'
import { migrateToLatest } from '../db/migrate.js'
import { TEMPLATE_DATA_DIR } from './paths.js'

if (!process.env.DATABASE_URL) {
  await rm(TEMPLATE_DATA_DIR, { recursive: true, force: true })
  const handle = createDatabase({ dataDir: TEMPLATE_DATA_DIR })
  await migrateToLatest(handle.db)
  await handle.close()
}
