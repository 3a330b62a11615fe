// The database layer on its own: migrations and the serialized PGlite driver.
import { randomUUID } from 'node:crypto'
import { sql } from 'kysely'
import t from 'tap'
import { createDatabase } from '../../db/engine/connect.js'
import type { Database } from '../../db/types.js'
import { createMigrator, migrateToLatest, schemaIsCurrent } from '../../db/engine/migrate.js'
import { testDatabaseEnv } from '../support/helper.js'

const env = await testDatabaseEnv(t)
const handle = createDatabase<Database>({ url: env.DATABASE_URL, dataDir: env.DATA_DIR ?? '' })
t.teardown(() => handle.close())
await migrateToLatest(handle.db)
const { db } = handle

const newUser = (label: string) => ({ id: randomUUID(), email: `${label}-${randomUUID().slice(0, 8)}@example.com`, password: 'x', updated_at: new Date() })

t.test('timestamps are read as ISO-8601 strings in UTC, whatever zone the literal names', async (t) => {
  const { rows: [row] } = await sql<{ fixed: string, micro: string, now: string, zone: string }>`
    select '2026-11-23 10:38:02.519123+05:30'::timestamptz as fixed, '2026-11-23 05:08:02.000001+00'::timestamptz as micro,
      now() as now, current_setting('TimeZone') as zone`.execute(db)
  t.equal(row?.fixed, '2026-11-23T05:08:02.519Z')
  t.equal(row?.micro, '2026-11-23T05:08:02.000Z')
  t.match(row?.now, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  t.equal(row?.zone, 'UTC', 'the session runs in UTC')
})

t.test('migrations are idempotent: a second run applies nothing', async (t) => {
  const { results } = await migrateToLatest(db)
  t.same(results, [])
})

t.test('a query issued while another request holds a transaction is not swept into it', async (t) => {
  const outside = newUser('outside')
  const inside = newUser('inside')
  let insideInserted!: () => void
  const started = new Promise<void>((resolve) => { insideInserted = resolve })
  const transaction = db.transaction().execute(async (tx) => {
    await tx.insertInto('users').values(inside).execute()
    insideInserted()
    // Give the concurrent insert every chance to run while this transaction is open.
    await new Promise((resolve) => setTimeout(resolve, 50))
    throw new Error('roll back')
  })
  await started
  const concurrent = db.insertInto('users').values(outside).execute()
  await t.rejects(transaction, /roll back/)
  await concurrent
  const ids = await db.selectFrom('users').select('id').where('id', 'in', [outside.id, inside.id]).execute()
  t.same(ids.map((r) => r.id), [outside.id], 'the rolled-back insert is gone, the concurrent one stays')
})

t.test('concurrent transactions each commit their own work', async (t) => {
  const users = Array.from({ length: 5 }, (_, i) => newUser(`tx${i}`))
  await Promise.all(users.map((user) => db.transaction().execute(async (tx) => {
    await tx.insertInto('users').values(user).execute()
    await tx.insertInto('user_preferences').values({ user_id: user.id, updated_at: new Date() }).execute()
  })))
  const { count } = await db.selectFrom('user_preferences')
    .select(sql<number>`count(*)::int`.as('count'))
    .where('user_id', 'in', users.map((u) => u.id))
    .executeTakeFirstOrThrow()
  t.equal(count, 5)
})

t.test('the schema enforces what the service relies on', async (t) => {
  const user = newUser('schema')
  await db.insertInto('users').values(user).execute()
  await t.rejects(db.insertInto('users').values({ ...newUser('dup'), email: user.email }).execute(), { code: '23505' }, 'unique email')
  await t.rejects(db.insertInto('users').values({ ...newUser('upper'), email: 'UPPER@example.com' }).execute(), { code: '23514' }, 'emails are stored lower-cased')
  await t.rejects(db.insertInto('tasks').values({ user_id: user.id, title: 'x', status: 'done' as 'todo', updated_at: new Date() }).execute(), 'task_status enum')
  await t.rejects(db.insertInto('tasks').values({ user_id: 'nobody', title: 'x', updated_at: new Date() }).execute(), { code: '23503' }, 'tasks need an owner')
})

t.test('the pending-email migration records an identity\'s address only where the account has not left it since the link', async (t) => {
  // Back to the migration before it (undoing any that came after it too).
  const down = await createMigrator(db).migrateTo('2026-11-26T00-00-00_sessions-identities')
  t.equal(down.results?.at(-1)?.migrationName, '2026-11-28T00-00-00_pending-email-device-links', 'back to before it')
  const linked = async (label: string, changedAfterLink: boolean) => {
    const user = newUser(label)
    await db.insertInto('users').values(user).execute()
    await sql`insert into user_identities (id, user_id, provider, issuer, subject, created_at) values (${randomUUID()}, ${user.id}, 'test', 'https://idp.example', ${randomUUID()}, now() - interval '1 hour')`.execute(db)
    // As the code before it did: an email change applied at once, unconfirmed.
    if (changedAfterLink) await sql`update users set email = ${`moved-${user.email}`}, email_changed_at = now() where id = ${user.id}`.execute(db)
    return user.id
  }
  const [kept, moved] = [await linked('kept', false), await linked('moved', true)]
  await migrateToLatest(db)
  const rows = await db.selectFrom('user_identities').innerJoin('users', 'users.id', 'user_identities.user_id')
    .select(['users.id', 'users.email', 'user_identities.account_email']).where('users.id', 'in', [kept, moved]).execute()
  t.match(rows.find((r) => r.id === kept), { account_email: String }, 'linked under the address it still has: recorded')
  t.equal(rows.find((r) => r.id === kept)?.account_email, rows.find((r) => r.id === kept)?.email)
  t.equal(rows.find((r) => r.id === moved)?.account_email, null, 'the address changed since: none, so the next reset removes it')
})

t.test('one query tells a start whether the migrator must run: only when the applied migrations are exactly the folder\'s', async (t) => {
  t.equal(await schemaIsCurrent(db), true, 'every migration of the folder applied')
  const down = await createMigrator(db).migrateDown()
  t.ok(down.results?.[0]?.migrationName, 'the last one undone')
  t.equal(await schemaIsCurrent(db), false, 'one pending')
  await migrateToLatest(db)
  t.equal(await schemaIsCurrent(db), true, 'applied again')
  const newer = '2099-01-01T00-00-00_from-a-newer-version'
  await sql`insert into kysely_migration (name, timestamp) values (${newer}, ${new Date().toISOString()})`.execute(db)
  t.teardown(() => sql`delete from kysely_migration where name = ${newer}`.execute(db).then(() => undefined))
  t.equal(await schemaIsCurrent(db), false, 'one applied that the folder lacks: the migrator decides (and refuses)')
  await sql`delete from kysely_migration where name = ${newer}`.execute(db)
  // A database no migration has run on: the table is missing, and the answer is "migrate", not an error.
  await db.transaction().execute(async (trx) => {
    await sql`alter table kysely_migration rename to kysely_migration_aside`.execute(trx)
    t.equal(await schemaIsCurrent(trx), false, 'no migration table yet')
    throw new Error('roll back')
  }).catch((err: Error) => { if (err.message !== 'roll back') throw err })
  t.equal(await schemaIsCurrent(db), true, 'rolled back: the table is there again')
})
