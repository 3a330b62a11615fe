// Runs the migrations in db/migrations (TypeScript in development and tests, the
// compiled JavaScript under dist/ in production).
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Kysely } from 'kysely'
import { FileMigrationProvider, Migrator, type MigrationResultSet } from 'kysely/migration'

const migrationFolder = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations')

export function createMigrator (db: Kysely<any>): Migrator {
  return new Migrator({
    db,
    provider: new FileMigrationProvider({
      fs,
      path,
      migrationFolder,
      import: (file: string) => import(pathToFileURL(file).href)
    })
  })
}

/** Migrates to the latest version; throws the first failure. */
export async function migrateToLatest (db: Kysely<any>): Promise<MigrationResultSet> {
  const result = await createMigrator(db).migrateToLatest()
  if (result.error) throw result.error
  return result
}
