// `npm run migrate [-- latest | up | down | list | make <name>]` on the configured database
// (DATABASE_URL, or the embedded one under DATA_DIR); without a verb, `latest`, which the
// server also does at start-up. Anything else is refused (exit 2) before the database is
// opened. On the embedded database it refuses while a server has the directory
// (db/engine/data-dir-lock.ts). In the image, without tsx: `node dist/scripts/migrate.js down`.
// Why this and not kysely-ctl: docs/database.md.
import { existsSync, readdirSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { createDatabase } from '../db/engine/connect.js'
import { listMigrations, migrateDown, migrateToLatest, migrateUp, MIGRATION_FOLDER, NoDownMigrationError } from '../db/engine/migrate.js'
import { ConfigError, loadConfig } from '../config.js'
import { DataDirInUseError } from '../db/engine/data-dir-lock.js'
import { loadEnvFile } from '../env-file.js'

const USAGE = `usage: npm run migrate [-- <verb>]
  latest        apply every pending migration (the default)
  up            apply the next pending migration
  down          undo the last applied migration (refused when it has no down)
  list          every migration, applied or pending
  make <name>   write db/migrations/<timestamp>_<name>.ts (name: lower-case words joined by -)`

type Verb = 'latest' | 'up' | 'down' | 'list'

/** The verb, the name for make, or why the arguments are refused. */
function parseArguments (args: readonly string[]): { verb: Verb } | { verb: 'make', name: string } | { refused: string } {
  const [verb = 'latest', ...rest] = args
  if (verb === 'make') {
    const [name, ...extra] = rest
    if (name === undefined) return { refused: 'make needs a name, e.g. `npm run migrate -- make add-task-priority`' }
    if (extra.length > 0) return { refused: `make takes one name, not ${rest.length}: ${rest.join(' ')}` }
    if (!/^[a-z0-9]+(-[a-z0-9]+)*$/.test(name)) return { refused: `not a migration name: ${name} (lower-case letters and digits, words joined by -)` }
    return { verb, name }
  }
  if (verb !== 'latest' && verb !== 'up' && verb !== 'down' && verb !== 'list') return { refused: `unknown verb: ${verb}` }
  if (rest.length > 0) return { refused: `${verb} takes no arguments: ${rest.join(' ')}` }
  return { verb }
}

// The ISO timestamp of the file names (CONTRIBUTING.md), colons as dashes.
const fileStamp = (date: Date) => date.toISOString().slice(0, 19).replaceAll(':', '-')

const TEMPLATE = `// What this migration changes, and why. Frozen in time: no app imports; every builder ends
// in .execute(); within PostgreSQL 15 and what PGlite supports.
import type { Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
}

export async function down (db: Kysely<any>): Promise<void> {
}
`

/** Writes a new migration from the template; its name sorts after every existing one, or it is refused. */
function makeMigration (name: string): string {
  if (import.meta.url.endsWith('.js')) throw new UsageError('make writes a TypeScript source: run it in a checkout (npm run migrate -- make …), not on the compiled build')
  const file = `${fileStamp(new Date())}_${name}.ts`
  const last = readdirSync(MIGRATION_FOLDER).filter((entry) => entry.endsWith('.ts')).sort().at(-1)
  // Kysely applies migrations in name order and refuses one that sorts before an applied one.
  if (last !== undefined && file <= last) throw new UsageError(`${file} would sort before ${last}: is this machine's clock behind?`)
  const path = join(MIGRATION_FOLDER, file)
  if (existsSync(path)) throw new UsageError(`${relative(process.cwd(), path)} exists`)
  writeFileSync(path, TEMPLATE, { flag: 'wx' })
  return path
}

class UsageError extends Error {}

async function run (args: readonly string[]): Promise<number> {
  const parsed = parseArguments(args)
  if ('refused' in parsed) {
    console.error(`${parsed.refused}\n${USAGE}`)
    return 2
  }
  if (parsed.verb === 'make') {
    console.log(`wrote ${relative(process.cwd(), makeMigration(parsed.name))}`)
    return 0
  }
  loadEnvFile()
  const config = loadConfig()
  const handle = createDatabase({ url: config.db.url, dataDir: config.db.dataDir, pooler: config.db.pooler, statementTimeoutMs: config.db.statementTimeoutMs })
  try {
    if (parsed.verb === 'list') {
      const migrations = await listMigrations(handle.db)
      for (const m of migrations) console.log(`${handle.kind}: ${m.executedAt === undefined ? 'pending' : 'applied'} ${m.name}`)
      const pending = migrations.filter((m) => m.executedAt === undefined).length
      console.log(`${handle.kind}: ${migrations.length - pending} applied, ${pending} pending`)
      return 0
    }
    const step = { latest: migrateToLatest, up: migrateUp, down: migrateDown }[parsed.verb]
    const { results = [] } = await step(handle.db)
    if (results.length === 0) console.log(`${handle.kind}: ${parsed.verb === 'down' ? 'no migration applied: nothing to undo' : 'already at the latest version'}`)
    for (const r of results) console.log(`${handle.kind}: ${r.migrationName} ${r.direction === 'Down' ? 'undone' : 'applied'}`)
    return 0
  } finally {
    await handle.close()
  }
}

try {
  process.exitCode = await run(process.argv.slice(2))
} catch (err) {
  const known = err instanceof ConfigError || err instanceof DataDirInUseError || err instanceof NoDownMigrationError || err instanceof UsageError
  console.error(known ? (err as Error).message : `migration failed: ${(err as Error).message}`)
  process.exitCode = 1
}
