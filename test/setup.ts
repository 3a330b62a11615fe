// Runs once before the test files (tap's `before`): builds the migrated embedded
// database that each test file copies, unless this version of it exists already.
import { existsSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { createDatabase } from '../db/connect.js'
import { migrateToLatest } from '../db/migrate.js'
import { templateDataDir } from './paths.js'

const target = templateDataDir()
if (!process.env.DATABASE_URL && !existsSync(target)) {
  const building = `${target}.building-${process.pid}`
  const handle = createDatabase({ dataDir: building })
  await migrateToLatest(handle.db)
  await handle.close()
  // Atomic publish; if a concurrent run won the race, its copy is as good as ours.
  await rename(building, target).catch(() => undefined)
  await rm(building, { recursive: true, force: true })
}
