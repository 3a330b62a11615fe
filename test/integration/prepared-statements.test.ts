// The hot queries run as named statements on a real PostgreSQL server (db/engine/prepared.ts),
// survive a migration that adds columns under them, and can be turned off for poolers
// that cannot keep them; sessions run in UTC whatever the URL asks. (Runs against
// DATABASE_URL's server, or the local one.)
import { sql, type Kysely } from 'kysely'
import t from 'tap'
import type { Database } from '../../db/types.js'
import { build, json, registerUser, serverDatabase } from '../support/helper.js'

// One pooled connection, so the session the service prepared in is the one asked.
const prepared = async (db: Kysely<Database>) =>
  (await sql<{ name: string }>`select name from pg_prepared_statements order by name`.execute(db)).rows.map((r) => r.name)

t.test('GET /tasks runs prepared statements, also after a migration adds columns', async (t) => {
  const { url } = await serverDatabase(t, 'prepared')
  const app = await build(t, { DATABASE_URL: url.toString(), DATABASE_POOL_MAX: '1' })
  const user = await registerUser(app)
  for (const title of ['one', 'two']) {
    t.equal((await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title } })).statusCode, 201)
  }
  const before = await app.inject({ method: 'GET', url: '/tasks', headers: user.auth })
  t.equal(before.statusCode, 200)
  t.same(json(before).data.map((task: { title: string }) => task.title), ['two', 'one'])
  // On a server of its own the page comes rendered as JSON, and its statement checks the token
  // too (tasks_page_json_for_token: routes/tasks/index.ts), as the create's does.
  t.same(await prepared(app.db), ['tasks_create_for_token', 'tasks_page_json_for_token'], 'the create and the page, each with the token check, are prepared')
  const filteredPast = await app.inject({ method: 'GET', url: '/tasks?status=todo&offset=5', headers: user.auth })
  t.same(json(filteredPast).data, [])
  t.equal(filteredPast.headers['x-total-count'], '2', 'a page past the end still carries the counts: the one statement always answers a row')
  t.same(await prepared(app.db), ['tasks_create_for_token', 'tasks_page_json_by_status_for_token', 'tasks_page_json_for_token'])

  // What a newer instance's migration might do while this one serves.
  await sql`alter table tasks add column later_column text`.execute(app.db)
  await sql`alter table users add column later_column text`.execute(app.db)
  const after = await app.inject({ method: 'GET', url: '/tasks', headers: user.auth })
  t.equal(after.statusCode, 200, 'no "cached plan must not change result type"')
  t.same(json(after).data, json(before).data)
  t.equal(after.headers['x-total-count'], '2')
  const created = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: 'three' } })
  t.equal(created.statusCode, 201, 'the prepared create too')
  t.notOk('later_column' in json(created).data)
})

t.test('sessions run in UTC with ISO dates, also when the URL sets options of its own', async (t) => {
  const { url } = await serverDatabase(t, 'session')
  url.searchParams.set('options', '-c TimeZone=America/New_York -c DateStyle=SQL,DMY')
  const app = await build(t, { DATABASE_URL: url.toString() })
  const { rows: [row] } = await sql<{ zone: string, style: string, at: string }>`
    select current_setting('TimeZone') as zone, current_setting('DateStyle') as style, '2026-11-23 05:08:02.519+00'::timestamptz as at`.execute(app.db)
  t.equal(row?.zone, 'UTC')
  t.match(row?.style, /^ISO/)
  t.equal(row?.at, '2026-11-23T05:08:02.519Z')
  const user = await registerUser(app)
  const me = await app.inject({ method: 'GET', url: '/auth/me', headers: user.auth })
  t.match(json(me).data.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
})

t.test('DATABASE_PREPARED_STATEMENTS=false: the same answers, nothing prepared', async (t) => {
  const { url } = await serverDatabase(t, 'unprepared')
  const app = await build(t, { DATABASE_URL: url.toString(), DATABASE_POOL_MAX: '1', DATABASE_PREPARED_STATEMENTS: 'false' })
  const user = await registerUser(app)
  t.equal((await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: 'one' } })).statusCode, 201)
  const res = await app.inject({ method: 'GET', url: '/tasks?status=todo', headers: user.auth })
  t.equal(res.statusCode, 200)
  t.equal(json(res).data.length, 1)
  t.same(await prepared(app.db), [])
})
