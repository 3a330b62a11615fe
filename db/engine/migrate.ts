// Runs the migrations in db/migrations (TypeScript in development and tests, the
// compiled JavaScript under dist/ in production): to the latest at start-up, and one step up
// or down, or a listing, for `npm run migrate` (scripts/migrate.ts).
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { PostgresAdapter, sql, type Kysely } from 'kysely'
import { FileMigrationProvider, Migrator, type MigrationInfo, type MigrationProvider, type MigrationResultSet } from 'kysely/migration'

/** db/migrations, beside this folder (in the sources and under dist/ alike). */
export const MIGRATION_FOLDER = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'migrations')

const fileProvider = new FileMigrationProvider({
  fs,
  path,
  migrationFolder: MIGRATION_FOLDER,
  import: (file: string) => import(pathToFileURL(file).href)
})

/** Kysely's migration files: its FileMigrationProvider takes these extensions (not declarations). */
const MIGRATION_FILE = /(?<!\.d)\.(?:[cm]?ts|[cm]?js)$/

/**
 * Whether the database has applied exactly the migrations of the folder, in one query and no
 * migration module loaded: what every start of an up-to-date instance (a restart, a rolling
 * deploy, a new instance of a fleet) asks before migrating, which otherwise takes a
 * transaction, the lock, the migrator's table checks and an import of every migration (issue
 * 30). Anything else (a migration pending, one the folder lacks, no table yet) answers false,
 * and the migrator then does what it always did, errors included.
 */
export async function schemaIsCurrent (db: Kysely<any>): Promise<boolean> {
  const files = (await fs.readdir(MIGRATION_FOLDER)).filter((name) => MIGRATION_FILE.test(name))
  const names = files.map((name) => name.slice(0, name.lastIndexOf('.'))).sort()
  let applied: string[]
  try {
    const { rows } = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db)
    applied = rows.map((row) => row.name)
  } catch {
    return false
  }
  return applied.length === names.length && applied.every((name, i) => name === names[i])
}

export function createMigrator (db: Kysely<any>, provider: MigrationProvider = fileProvider): Migrator {
  return new Migrator({ db, provider })
}

/** `down` asked of a migration that has none: nothing is undone. */
export class NoDownMigrationError extends Error {
  constructor (readonly migrationName: string) {
    super(`${migrationName} has no down: nothing was undone (write its down, or restore the database from a backup)`)
  }
}

/**
 * Migrates to the latest version; throws the first failure. The migrator runs inside one
 * transaction, which first takes the migration lock, so that instances starting together
 * migrate once, also through a pooler in transaction mode (MigrationLockAdapter says why).
 */
export async function migrateToLatest (db: Kysely<any>, provider?: MigrationProvider): Promise<MigrationResultSet> {
  return underLock(db, (migrator) => migrator.migrateToLatest(), provider)
}

/** Applies the next pending migration, if there is one. */
export async function migrateUp (db: Kysely<any>, provider?: MigrationProvider): Promise<MigrationResultSet> {
  return underLock(db, (migrator) => migrator.migrateUp(), provider)
}

/**
 * Undoes the last applied migration. Refuses (NoDownMigrationError) when it has no `down`:
 * Kysely would report it "not executed" and succeed, leaving the schema as it was.
 */
export async function migrateDown (db: Kysely<any>, provider?: MigrationProvider): Promise<MigrationResultSet> {
  return underLock(db, async (migrator) => {
    const last = (await migrator.getMigrations()).findLast((migration) => migration.executedAt !== undefined)
    if (last !== undefined && last.migration.down === undefined) throw new NoDownMigrationError(last.name)
    return migrator.migrateDown()
  }, provider)
}

/** Every migration of the folder, in order, with when it was applied (undefined: pending). */
export async function listMigrations (db: Kysely<any>, provider?: MigrationProvider): Promise<readonly MigrationInfo[]> {
  return underLock(db, (migrator) => migrator.getMigrations(), provider)
}

// One transaction that first takes the migration lock; a failure rolls back every migration
// of the run.
async function underLock<T> (db: Kysely<any>, run: (migrator: Migrator) => Promise<T>, provider?: MigrationProvider): Promise<T> {
  return db.transaction().execute(async (trx) => {
    // Before the migrator's own first statements: it creates its tables if they are missing,
    // which instances doing at once would collide on.
    await sql`select pg_advisory_xact_lock(${sql.raw(MIGRATION_LOCK_KEY)})`.execute(trx)
    const result = await run(createMigrator(trx, provider))
    // Thrown inside, so the transaction is rolled back, every migration of the run with it.
    if (isFailedResultSet(result)) throw result.error
    return result
  })
}

const isFailedResultSet = (value: unknown): value is Required<MigrationResultSet> =>
  typeof value === 'object' && value !== null && 'error' in value && value.error !== undefined

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
