// Runs once before tap (scripts/test.ts, for every test command): builds the migrated embedded
// database that each app's database copies, unless this version of it exists already.
import { existsSync, mkdirSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { createDatabase } from '../../db/engine/connect.js'
import { migrateToLatest } from '../../db/engine/migrate.js'
import { templateDataDir } from './paths.js'

const target = templateDataDir()
if (!process.env.DATABASE_URL && !existsSync(target)) {
  const building = `${target}.building-${process.pid}`
  // initdb in this process; the server runs it in a child process (db/engine/pglite-init.ts).
  mkdirSync(building, { recursive: true })
  await (await PGlite.create(join(building, 'pglite'))).close()
  const handle = createDatabase({ dataDir: building })
  await migrateToLatest(handle.db)
  await handle.close()
  // Atomic publish; if a concurrent run won the race, its copy is as good as ours.
  await rename(building, target).catch(() => undefined)
  await rm(building, { recursive: true, force: true })
}
