// Runs once before the test files (tap's `before`): builds the migrated embedded
// database that each test file copies, unless this version of it exists already.
import { existsSync, mkdirSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { createDatabase } from '../db/connect.js'
import { migrateToLatest } from '../db/migrate.js'
import { templateDataDir } from './paths.js'

const target = templateDataDir()
if (!process.env.DATABASE_URL && !existsSync(target)) {
  const building = `${target}.building-${process.pid}`
  // initdb in this process. The server runs it in a child process (db/pglite-init.ts), and a
  // child of tap's `before` script is measured for coverage, which tap then reports, and fails
  // on, although the suite has coverage off.
  mkdirSync(building, { recursive: true })
  await (await PGlite.create(join(building, 'pglite'))).close()
  const handle = createDatabase({ dataDir: building })
  await migrateToLatest(handle.db)
  await handle.close()
  // Atomic publish; if a concurrent run won the race, its copy is as good as ours.
  await rename(building, target).catch(() => undefined)
  await rm(building, { recursive: true, force: true })
}
