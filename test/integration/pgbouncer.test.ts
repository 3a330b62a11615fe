// PgBouncer 1.18 (Debian's) in transaction mode between the service and PostgreSQL: the
// combination that works (DATABASE_POOLER=transaction, named statements off, the statement
// timeout on the database) and, for each way to get it wrong, a start-up that stops with one
// line saying what to set, instead of a service that does not start with a stack trace, runs
// with no statement timeout, or answers every other request 500.
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { sql } from 'kysely'
import t from 'tap'
import { build, json, registerUser, serverDatabase, testConfig, TEST_SECRET } from '../support/helper.js'
import { startPgBouncer } from '../fleet/pgbouncer.js'
import { ROOT } from '../support/paths.js'
import { freePort, startServer } from './process.js'

interface Teardown { teardown: (fn: () => unknown) => void }

const stock = await startPgBouncer(t)
// Few server sessions for many clients, as a busy pooler has: sessions change hands all the time.
const narrow = await startPgBouncer(t, { poolSize: 2 })
const ignoring = await startPgBouncer(t, { ignoreStartupParameters: ['statement_timeout'] })

/** server.ts as a process: its exit code and everything it printed. */
async function startUp (env: Record<string, string>): Promise<{ code: number | null, output: string }> {
  const server = startServer({ PORT: String(await freePort()), AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', ...env })
  t.teardown(() => { server.child.kill('SIGKILL') })
  const code = await Promise.race([server.exited, new Promise<'running'>((resolve) => {
    const check = setInterval(() => {
      if (!/"msg":"Server listening/.test(server.output())) return
      clearInterval(check)
      resolve('running')
    }, 100)
    server.exited.then(() => clearInterval(check), () => {})
  })])
  return { code: code === 'running' ? -1 : code, output: server.output().trim() }
}

/** The app in process on `url`, with nothing else of the test database's making. */
const app = async (t: Teardown, env: Record<string, string>) =>
  build(t, {}, await testConfig(t, env, async () => ({})))

t.test('stock PgBouncer, DATABASE_POOLER unset: start-up stops with one line (it refuses statement_timeout at connect)', async (t) => {
  const { name } = await serverDatabase(t, 'pgb_stock')
  const { code, output } = await startUp({ DATABASE_URL: stock.url(name) })
  t.equal(code, 1, 'exits 1')
  t.equal(output.split('\n').length, 1, 'one line')
  t.match(output, /^Database: the server refused a start-up parameter \("unsupported startup parameter: statement_timeout"\), as PgBouncer does with statement_timeout: behind a pooler in transaction mode set DATABASE_POOLER=transaction/)
})

t.test('PgBouncer ignoring statement_timeout, DATABASE_POOLER unset: start-up stops with one line instead of running with no timeout', async (t) => {
  const { name } = await serverDatabase(t, 'pgb_ignore')
  const { code, output } = await startUp({ DATABASE_URL: ignoring.url(name) })
  t.equal(code, 1, 'exits 1')
  t.equal(output.split('\n').length, 1, 'one line')
  t.match(output, /^Database: statement_timeout on the server is 0 \(none\), not the 15000 ms the service sent when connecting: something between the service and PostgreSQL drops start-up parameters/)
})

t.test('DATABASE_POOLER=transaction with no timeout on the role or database: refused, naming what to run', async (t) => {
  const { name } = await serverDatabase(t, 'pgb_notimeout')
  await t.rejects(app(t, { DATABASE_URL: stock.url(name), DATABASE_POOLER: 'transaction', DATABASE_PREPARED_STATEMENTS: 'false' }), {
    name: 'DatabaseSetupError',
    message: /^Database: with DATABASE_POOLER=transaction the statement timeout must be set on the server sessions, and statement_timeout there is 0 \(none\): ALTER ROLE postgres SET statement_timeout = 15000 \(or ALTER DATABASE pgb_notimeout_\w+ SET …/
  })
})

t.test('DATABASE_POOLER=transaction with a longer timeout on the database than DATABASE_STATEMENT_TIMEOUT_MS: refused', async (t) => {
  const { name, admin } = await serverDatabase(t, 'pgb_longer')
  await admin.query(`alter database ${name} set statement_timeout = 60000`)
  await t.rejects(app(t, { DATABASE_URL: stock.url(name), DATABASE_POOLER: 'transaction', DATABASE_PREPARED_STATEMENTS: 'false' }), {
    name: 'DatabaseSetupError',
    message: /statement_timeout there is 60000 ms, longer than DATABASE_STATEMENT_TIMEOUT_MS \(15000\)/
  })
})

t.test('DATABASE_POOLER=transaction with named statements on: refused, since PgBouncer 1.18 loses them between transactions', async (t) => {
  const { name, admin } = await serverDatabase(t, 'pgb_prepared')
  await admin.query(`alter database ${name} set statement_timeout = 15000`)
  const { code, output } = await startUp({ DATABASE_URL: stock.url(name), DATABASE_POOLER: 'transaction' })
  t.equal(code, 1, 'exits 1')
  t.equal(output, 'Database: named prepared statements do not survive from one transaction to the next on these connections (a pooler in transaction mode, such as PgBouncer before 1.21 or without max_prepared_statements): set DATABASE_PREPARED_STATEMENTS=false (docs/operations.md, "PgBouncer")')
})

t.test('instances starting at once through the pooler migrate once, and leave no migration lock behind', async (t) => {
  const { name, admin } = await serverDatabase(t, 'pgb_migrate')
  await admin.query(`alter database ${name} set statement_timeout = 15000`)
  const env = { DATABASE_URL: narrow.url(name), DATABASE_POOLER: 'transaction', DATABASE_PREPARED_STATEMENTS: 'false' }
  // The first round migrates the empty database; every start takes the lock.
  for (let round = 1; round <= 3; round++) {
    await t.test(`round ${round}: five at once`, async (t) => {
      const apps = await Promise.all(Array.from({ length: 5 }, () => app(t, env)))
      const ready = await Promise.all(apps.map(async (started) => (await started.inject({ method: 'GET', url: '/ready' })).statusCode))
      t.same(ready, [200, 200, 200, 200, 200], 'all ready')
      const { rows } = await admin.query('select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database where l.locktype = \'advisory\' and d.datname = $1', [name])
      t.equal(rows[0].n, 0, 'no advisory lock left on any server session')
    })
  }
  const later = await app(t, env)
  const migrated = await later.db.selectFrom('kysely_migration' as never).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
  t.equal(Number(migrated.n), readdirSync(join(ROOT, 'db/migrations')).length, 'every migration recorded once')
})

t.test('the working combination: DATABASE_POOLER=transaction, named statements off, the timeout on the database', async (t) => {
  const { name, admin } = await serverDatabase(t, 'pgb_works')
  await admin.query(`alter database ${name} set statement_timeout = 1500`)
  const service = await app(t, {
    DATABASE_URL: stock.url(name), DATABASE_POOLER: 'transaction', DATABASE_PREPARED_STATEMENTS: 'false', DATABASE_STATEMENT_TIMEOUT_MS: '1500'
  })

  t.test('requests at once, on every pooled connection, answer as they would without the pooler', async (t) => {
    // Ten users: each user's pages are built one at a time (plugins/app/user-turns.ts), so
    // the GETs of one user would run one after another, not on every pooled connection.
    const users = await Promise.all(Array.from({ length: 10 }, () => registerUser(service)))
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => {
      const user = users[Math.floor(i / 2) % users.length]!
      return i % 2 === 0
        ? service.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: `task ${i}` } })
        : service.inject({ method: 'GET', url: '/tasks?limit=20', headers: user.auth })
    }))
    const statuses = new Map<number, number>()
    for (const answer of answers) statuses.set(answer.statusCode, (statuses.get(answer.statusCode) ?? 0) + 1)
    t.same(Object.fromEntries(statuses), { 200: 100, 201: 100 }, 'no 500 (prepared statement … does not exist / already exists)')
    const counted = await service.db.selectFrom('tasks').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()
    t.equal(Number(counted.n), 100, 'every task stored once')
  })

  t.test('the statement timeout holds on every server session the pooler hands out', async (t) => {
    const slow = await Promise.allSettled(Array.from({ length: 6 }, () => sql`select pg_sleep(5)`.execute(service.db)))
    t.same(slow.map((result) => result.status === 'rejected' && (result.reason as { code?: string }).code), Array(6).fill('57014'),
      'each cancelled by the server: canceling statement due to statement timeout')
    const { rows } = await sql<{ timeout: string }>`select current_setting('statement_timeout') as timeout`.execute(service.db)
    t.equal(rows[0]?.timeout, '1500ms')
  })

  t.test('sessions still run in UTC with ISO dates (PgBouncer carries TimeZone and DateStyle)', async (t) => {
    const { rows: [row] } = await sql<{ zone: string, style: string }>`select current_setting('TimeZone') as zone, current_setting('DateStyle') as style`.execute(service.db)
    t.equal(row?.zone, 'UTC')
    t.match(row?.style, /^ISO/)
    const user = await registerUser(service)
    const me = await service.inject({ method: 'GET', url: '/auth/me', headers: user.auth })
    t.match(json(me).data.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  })
})
