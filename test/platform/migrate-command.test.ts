// `npm run migrate`: one step down and back up, a listing, and what it does not understand
// refused before it touches the database. Run as the image runs it (node dist/scripts/migrate.js,
// the compiled scripts/migrate.ts behind `npm run migrate`) on this run's database: a copy of the
// migrated embedded one, or a fresh PostgreSQL database.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { promises as fs, readdirSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { sql, type Kysely } from 'kysely'
import { FileMigrationProvider } from 'kysely/migration'
import t from 'tap'
import { createDatabase } from '../../db/engine/connect.js'
import { MIGRATION_FOLDER, migrateDown, migrateToLatest, migrateUp, NoDownMigrationError } from '../../db/engine/migrate.js'
import { testDatabaseEnv } from '../support/helper.js'
import { ROOT } from '../support/paths.js'

const env = await testDatabaseEnv(t)
const migrations = readdirSync(MIGRATION_FOLDER).filter((file) => file.endsWith('.js')).map((file) => file.replace(/\.js$/, '')).sort()
const last = migrations.at(-1)!

async function migrate (...args: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, [path.join(ROOT, 'scripts/migrate.js'), ...args], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', ...env }, stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const [code] = await once(child, 'exit') as [number | null]
  return { code, stdout, stderr }
}

/** The database, opened and closed again (the embedded one admits one process at a time). */
async function withDatabase<T> (use: (db: Kysely<any>) => Promise<T>): Promise<T> {
  const handle = createDatabase({ url: env.DATABASE_URL, dataDir: env.DATA_DIR ?? '' })
  try {
    return await use(handle.db)
  } finally {
    await handle.close()
  }
}

/** What a migration changes: the tables' columns, triggers and functions, and the migrations recorded as applied. */
async function schemaState (db: Kysely<any>): Promise<{ objects: string[], applied: string[] }> {
  const { rows: objects } = await sql<{ name: string }>`
    select table_name || '.' || column_name as name from information_schema.columns where table_schema = 'public' and table_name not like 'kysely_%'
    union select 'trigger ' || event_object_table || '.' || trigger_name from information_schema.triggers where trigger_schema = 'public'
    union select 'function ' || routine_name from information_schema.routines where routine_schema = 'public'
    order by 1`.execute(db)
  const applied = await db.selectFrom('kysely_migration').select('name').orderBy('name').execute()
  return { objects: objects.map((row) => row.name), applied: applied.map((row) => row.name) }
}

t.test('down undoes the last migration, a verb it does not know changes nothing, up applies it again', async (t) => {
  // A fresh PostgreSQL database is empty; the embedded copy is migrated already.
  const before = await withDatabase(async (db) => {
    await migrateToLatest(db)
    return schemaState(db)
  })
  t.same(before.applied, migrations, 'every migration applied')

  const down = await migrate('down')
  t.equal(down.code, 0, 'down exits 0', down)
  t.match(down.stdout, new RegExp(`: ${last} undone\\n$`), 'and names the migration it undid')
  const undone = await withDatabase(schemaState)
  t.same(undone.applied, migrations.slice(0, -1), 'the last migration is no longer applied')
  t.not(undone.objects.join(), before.objects.join(), 'what it made is gone')

  // Refused before the database is opened; the listing below shows nothing moved.
  for (const args of [['frobnicate'], ['down', '--all'], ['up', '2'], ['make']]) {
    const refused = await migrate(...args)
    t.equal(refused.code, 2, `${args.join(' ')}: exit 2`, refused)
    t.equal(refused.stdout, '', 'nothing done')
    t.match(refused.stderr, /^(unknown verb: frobnicate|down takes no arguments: --all|up takes no arguments: 2|make needs a name)/, 'says what it refused')
    t.match(refused.stderr, /usage: npm run migrate/, 'and how to call it')
  }

  const list = await migrate('list')
  t.equal(list.code, 0, 'list exits 0', list)
  t.match(list.stdout, new RegExp(`: pending ${last}\\n`), 'the undone migration is pending')
  t.match(list.stdout, new RegExp(`: ${migrations.length - 1} applied, 1 pending\\n$`), 'still as down left it')

  const up = await migrate('up')
  t.equal(up.code, 0, 'up exits 0', up)
  t.match(up.stdout, new RegExp(`: ${last} applied\\n$`))
  t.same(await withDatabase(schemaState), before, 'the schema is back as it was')
})

t.test('down refuses a migration without a down, and the schema stays as it is', async (t) => {
  const files = new FileMigrationProvider({ fs, path, migrationFolder: MIGRATION_FOLDER, import: (file: string) => import(pathToFileURL(file).href) })
  const name = '9999-01-01T00-00-00_no-down'
  const provider = {
    getMigrations: async () => ({
      ...await files.getMigrations(),
      [name]: { up: async (db: Kysely<any>) => { await db.schema.createTable('no_down').addColumn('id', 'integer').execute() } }
    })
  }
  await withDatabase(async (db) => {
    await migrateUp(db, provider)
    await t.rejects(migrateDown(db, provider), new NoDownMigrationError(name), 'refused, naming the migration')
    t.ok(await db.selectFrom('kysely_migration').select('name').where('name', '=', name).executeTakeFirst(), 'still recorded as applied')
    t.ok(await db.selectFrom('no_down' as never).selectAll().execute(), 'its table is still there')
    // Back to the folder's migrations, for whatever runs after.
    await db.deleteFrom('kysely_migration').where('name', '=', name).execute()
    await db.schema.dropTable('no_down').execute()
  })
})
