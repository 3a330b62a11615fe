// The embedded database in its own thread (db/engine/pglite-thread.ts): the server's event loop
// keeps answering while queries run, and a thread that dies or hangs is noticed rather than
// waited on forever. Always on PGlite, also when DATABASE_URL is set.
import { readdirSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CompiledQuery, sql } from 'kysely'
import t, { type Test } from 'tap'
import { PGliteThread } from '../../db/engine/pglite-thread.js'
import { createTaskStatement } from '../../db/tasks.js'
import { createDatabase, isDatabaseUnavailable } from '../../db/engine/connect.js'
import { writeStamp } from '../../db/engine/embedded-template.js'
import { namedText } from '../../db/engine/statement-name.js'
import { migrateToLatest, schemaIsCurrent } from '../../db/engine/migrate.js'
import { databaseThreadOf } from '../support/database-thread.js'
import { build, embeddedDatabaseEnv, registerUser, testConfig } from '../support/helper.js'

// The suite's configuration follows DATABASE_URL (test/support/helper.ts), so a DATABASE_URL in
// the environment is taken out of the loaded configuration (not out of process.env, which the
// other files of the suite's process read).
const embeddedApp = async (t: Test) => {
  const config = await testConfig(t, {}, embeddedDatabaseEnv)
  return build(t, {}, { ...config, db: { ...config.db, url: undefined } })
}

// PGlite's pg_sleep keeps its thread busy for the whole time, as a heavy query would.
const slowQuery = (seconds: number) => sql<{ done: number }>`select pg_sleep(${seconds}), 1 as done`

t.test('the server answers while the embedded database is busy: /health returns before a slow query ends', async (t) => {
  const app = await embeddedApp(t)
  let queryDone = false
  const slow = slowQuery(0.5).execute(app.db).then(() => { queryDone = true })
  // Let the query reach the database thread first.
  await new Promise((resolve) => setTimeout(resolve, 50))
  const health = await app.inject({ method: 'GET', url: '/health' })
  t.equal(health.statusCode, 200)
  t.equal(queryDone, false, 'the slow query is still running when /health has answered')
  await slow
})

t.test('the hot queries run as named statements in the embedded session too; a failing one leaves it usable', async (t) => {
  const app = await embeddedApp(t)
  const user = await registerUser(app)
  const prepared = async () => (await sql<{ name: string }>`select name from pg_prepared_statements order by name`.execute(app.db)).rows.map((r) => r.name)
  for (const title of ['one', 'two']) {
    t.equal((await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title, dueDate: '2026-12-01T09:00:00.000Z' } })).statusCode, 201)
  }
  const list = await app.inject({ method: 'GET', url: '/tasks', headers: user.auth })
  t.same(list.json().data.map((task: { title: string, dueDate: string }) => [task.title, task.dueDate]),
    [['two', '2026-12-01T09:00:00.000Z'], ['one', '2026-12-01T09:00:00.000Z']], 'parameters and results round-trip through the named statements')
  // The first create reads the token's holder in its statement, and the process keeps it
  // (accounts/holder-cache.ts): the second create and the page run without it.
  t.same(await prepared(), ['tasks_create', 'tasks_create_for_token', 'tasks_page_json'], 'the create with the token check, then the create and the page alone, are prepared')

  // A named statement that fails (no such owner) answers its error and the session goes on.
  await t.rejects(createTaskStatement.run(app.db, { userId: 'nobody', title: 'x', description: null, status: 'todo', dueDate: null }), { code: '23503' })
  t.equal((await app.inject({ method: 'GET', url: '/tasks?status=todo', headers: user.auth })).json().total, 2)
})

t.test('a notification reaches its listener before the answer of the query that committed it; none before the commit', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'tsb-notify-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const handle = createDatabase({ dataDir, template: false })
  t.teardown(() => handle.close())
  const heard: string[] = []
  await handle.listen!('test_channel', (payload) => heard.push(payload))
  await handle.listen!('other_channel', (payload) => heard.push(`other: ${payload}`))

  await sql`select pg_notify('test_channel', 'plain')`.execute(handle.db)
  t.same(heard, ['plain'], 'a plain query (PGlite\'s own reader)')
  // A prepared query's named statement, whose answer the thread reads itself (pglite.worker.ts, readAnswer).
  await handle.db.executeQuery(CompiledQuery.raw(namedText('test_notify', 'select pg_notify($1, $2)'), ['test_channel', 'named']))
  t.same(heard, ['plain', 'named'], 'a named statement')
  await sql`select pg_notify('unheard_channel', 'x')`.execute(handle.db)
  t.same(heard, ['plain', 'named'], 'a channel nobody listens on is not heard')

  await handle.db.transaction().execute(async (tx) => {
    await sql`select pg_notify('test_channel', 'in a transaction')`.execute(tx)
    await sql`select pg_notify('other_channel', 'too')`.execute(tx)
    t.same(heard, ['plain', 'named'], 'nothing before the commit')
  })
  t.same(heard, ['plain', 'named', 'in a transaction', 'other: too'], 'all of it once committed, before the commit answered')
  await t.rejects(handle.db.transaction().execute(async (tx) => {
    await sql`select pg_notify('test_channel', 'rolled back')`.execute(tx)
    throw new Error('roll back')
  }))
  t.same(heard, ['plain', 'named', 'in a transaction', 'other: too'], 'a rolled-back transaction sends nothing')
})

t.test('a database thread that dies: requests waiting on it get 503, /ready fails, the server closes and exits non-zero', async (t) => {
  const app = await embeddedApp(t)
  const { auth } = await registerUser(app)
  const slow = slowQuery(1).execute(app.db)
  // Requests queued behind the slow query, as under load.
  const tasks = app.inject({ method: 'GET', url: '/tasks', headers: auth })
  const ready = app.inject({ method: 'GET', url: '/ready' })
  await new Promise((resolve) => setTimeout(resolve, 100))
  await databaseThreadOf(app.config.db.dataDir).terminate()

  const err = await slow.then(() => undefined, (e: Error) => e)
  t.match(err, { code: 'PGLITE_THREAD_FAILED' }, 'the query in flight fails')
  t.ok(err && isDatabaseUnavailable(err), 'as "database unavailable"')
  t.equal((await tasks).statusCode, 503)
  t.match((await tasks).json(), { success: false, code: 'SERVICE_UNAVAILABLE' })
  t.equal((await ready).statusCode, 503, '/ready fails: the load balancer stops sending traffic')

  await app.close()
  t.equal(process.exitCode, 1, 'the process exits non-zero once the server has closed')
  process.exitCode = 0
})

t.test('a query the thread does not answer in time fails the thread: PGlite cannot cancel a statement', async (t) => {
  const { DATA_DIR } = await embeddedDatabaseEnv(t)
  const fatal: Error[] = []
  const thread = await PGliteThread.start({ dataDir: `${DATA_DIR}/pglite`, queryTimeoutMs: 300, onFatal: (err) => fatal.push(err) })
  t.teardown(() => thread.close())
  const started = Date.now()
  await t.rejects(thread.query('select pg_sleep(5)', []), { code: 'PGLITE_THREAD_FAILED', message: 'the database thread did not answer within 300 ms' })
  t.ok(Date.now() - started < 4000, 'the caller is answered at the bound, not when the statement ends')
  t.equal(fatal.length, 1, 'onFatal is told once')
  await t.rejects(thread.query('select 1', []), { code: 'PGLITE_THREAD_FAILED' }, 'later queries are refused at once')
})

t.test('closing lets queries already sent finish, then closes the directory cleanly', async (t) => {
  const { DATA_DIR } = await embeddedDatabaseEnv(t)
  const dataDir = `${DATA_DIR}/pglite`
  const first = await PGliteThread.start({ dataDir, queryTimeoutMs: 10_000 })
  await first.query('create table kept (id int)', [])
  const insert = first.query('insert into kept select 1 from pg_sleep(0.3)', [])
  const closed = first.close()
  t.match(await insert, { affectedRows: 1 }, 'the insert sent before close() finishes')
  await closed
  await t.rejects(first.query('select 1', []), { code: 'PGLITE_THREAD_FAILED', message: 'the database is closed' })

  const second = await PGliteThread.start({ dataDir, queryTimeoutMs: 10_000 })
  t.teardown(() => second.close())
  t.same((await second.query('select count(*)::int as n from kept', [])).rows, [{ n: 1 }], 'and is there when the directory is opened again')
})

t.test('a fresh directory is initialised, then served', async (t) => {
  const { DATA_DIR } = await embeddedDatabaseEnv(t)
  const thread = await PGliteThread.start({ dataDir: `${DATA_DIR}/fresh`, settings: ['shared_buffers=24MB'], queryTimeoutMs: 10_000 })
  t.teardown(() => thread.close())
  t.same((await thread.query('select current_setting($1) as value', ['shared_buffers'])).rows, [{ value: '24MB' }], 'with the settings given')
})

t.test('a directory that cannot be used or initialised: start-up fails and says why', async (t) => {
  const { DATA_DIR } = await embeddedDatabaseEnv(t)
  const file = `${DATA_DIR}/a-file`
  writeFileSync(file, '')
  await t.rejects(PGliteThread.start({ dataDir: `${file}/db`, queryTimeoutMs: 10_000 }), {
    code: 'PGLITE_THREAD_FAILED',
    message: new RegExp(`^cannot take the database directory ${file}/db: ENOTDIR`)
  })
  await t.rejects(PGliteThread.start({ dataDir: file, queryTimeoutMs: 10_000 }), {
    code: 'PGLITE_THREAD_FAILED',
    message: /^initialising the database failed \(exit code 1\): .*ErrnoError/
  })
  t.same(readdirSync(DATA_DIR).filter((name) => name.includes('.lock.')), [], 'and holds nothing after')
})

t.test('a second thread on a directory in use is refused, naming this process; once closed, the directory opens again', async (t) => {
  const { DATA_DIR } = await embeddedDatabaseEnv(t)
  const dataDir = `${DATA_DIR}/pglite`
  const first = await PGliteThread.start({ dataDir, queryTimeoutMs: 10_000 })
  await t.rejects(PGliteThread.start({ dataDir, queryTimeoutMs: 10_000 }), {
    code: 'DATA_DIR_IN_USE',
    message: new RegExp(`^Data directory in use: the embedded database in ${dataDir} is held by this process \\(pid ${process.pid}\\)`)
  })
  t.same((await first.query('select 1 as one', [])).rows, [{ one: 1 }], 'the first is unaffected')
  await first.close()
  const second = await PGliteThread.start({ dataDir, queryTimeoutMs: 10_000 })
  t.teardown(() => second.close())
  t.same((await second.query('select 1 as one', [])).rows, [{ one: 1 }])
})

t.test('a fresh directory copies a template of this code (schema current at once); a template of other code is ignored', async (t) => {
  // A migrated data directory, stamped as the build stamps its template.
  const { DATA_DIR: template } = await embeddedDatabaseEnv(t)
  await writeStamp(template)
  const fresh = async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'tsb-template-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    return createDatabase({ dataDir, template })
  }

  const copied = await fresh()
  t.equal(await schemaIsCurrent(copied.db), true, 'every migration applied before the migrator runs: the template was copied')
  t.same((await sql<{ n: number }>`select count(*)::int as n from users`.execute(copied.db)).rows, [{ n: 0 }], 'its tables are there, empty')
  await copied.close()

  // Made by another PGlite or other migrations: a fresh directory is initialised instead.
  writeFileSync(join(template, 'STAMP'), 'pglite 0.0.1 migrations 0000000000000000')
  const initialised = await fresh()
  t.equal(await schemaIsCurrent(initialised.db), false, 'not copied: initdb only, nothing migrated yet')
  await migrateToLatest(initialised.db)
  t.equal(await schemaIsCurrent(initialised.db), true)
  await initialised.close()
})
