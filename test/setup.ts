// Runs once before the test files (`npm test` runs it before tap; the integration suite, as
// tap's `before`): builds the migrated embedded database that each app's database copies,
// unless this version of it exists already.
import { existsSync, mkdirSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { createDatabase } from '../db/engine/connect.js'
import { migrateToLatest } from '../db/engine/migrate.js'
import { templateDataDir } from './paths.js'

const target = templateDataDir()
if (!process.env.DATABASE_URL && !existsSync(target)) {
  const building = `${target}.building-${process.pid}`
  // initdb in this process. The server runs it in a child process (db/engine/pglite-init.ts), and a
  // child of tap's `before` script is measured for coverage, which tap then reports, and fails
  // on, although the suites have coverage off. (`npm test` runs this file outside tap for the
  // same reason: on Node 22 tap measured the `before` script itself.)
  mkdirSync(building, { recursive: true })
  await (await PGlite.create(join(building, 'pglite'))).close()
  const handle = createDatabase({ dataDir: building })
  await migrateToLatest(handle.db)
  await handle.close()
  // Atomic publish; if a concurrent run won the race, its copy is as good as ours.
  await rename(building, target).catch(() => undefined)
  await rm(building, { recursive: true, force: true })
}
