// Runs the migrations in db/migrations (TypeScript in development and tests, the
// compiled JavaScript under dist/ in production).
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { PostgresAdapter, sql, type Kysely } from 'kysely'
import { FileMigrationProvider, Migrator, type MigrationResultSet } from 'kysely/migration'

const migrationFolder = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'migrations')

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

/**
 * Migrates to the latest version; throws the first failure. The migrator runs inside one
 * transaction, which first takes the migration lock, so that instances starting together
 * migrate once, also through a pooler in transaction mode (MigrationLockAdapter says why).
 */
export async function migrateToLatest (db: Kysely<any>): Promise<MigrationResultSet> {
  return db.transaction().execute(async (trx) => {
    // Before the migrator's own first statements: it creates its tables if they are missing,
    // which instances doing at once would collide on.
    await sql`select pg_advisory_xact_lock(${sql.raw(MIGRATION_LOCK_KEY)})`.execute(trx)
    const result = await createMigrator(trx).migrateToLatest()
    // Thrown inside, so the transaction is rolled back, every migration of the run with it.
    if (result.error) throw result.error
    return result
  })
}

/** Kysely's own key, so a running instance of an older version, migrating under Kysely's lock, still excludes this one. */
const MIGRATION_LOCK_KEY = '3853314791062309107'

/**
 * Kysely's PostgreSQL migration lock is a session-level advisory lock, taken and released on a
 * pinned connection around the migrations' transaction. Through a pooler in transaction mode a
 * client connection pins no server session: the lock was taken on one session and released on
 * another, so two of three instances started at once ran the first migration together (a
 * duplicate key in pg_type), and a lock left on a pooled session would hold up later starts.
 * migrateToLatest holds a transaction-level lock instead, in the transaction the migrations
 * run in: held by exactly the session that migrates, released by its commit or rollback. With
 * this adapter Kysely takes no lock of its own.
 */
export class MigrationLockAdapter extends PostgresAdapter {
  override async acquireMigrationLock (): Promise<void> {}
  override async releaseMigrationLock (): Promise<void> {}
}
