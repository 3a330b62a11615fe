// A silent partition between the service and PostgreSQL (issue 12 row 8): the proxy stops
// passing bytes both ways but keeps every socket open, so no error, reset or close ever
// arrives and only the service's own query timeout can end the wait. Runs against
// DATABASE_URL's server, or the local one, whichever database the suite runs on.
import t from 'tap'
import { sql } from 'kysely'
import { isDatabaseUnavailable } from '../../db/engine/connect.js'
import { loadConfig } from '../../config.js'
import { build, json, registerUser, serverDatabase, TEST_SECRET } from '../support/helper.js'
import { TcpProxy } from './tcp-proxy.js'

const STATEMENT_TIMEOUT_MS = 1000
const QUERY_TIMEOUT_MS = 1500
const CONNECT_TIMEOUT_MS = 500

const { url: databaseUrl } = await serverDatabase(t, 'partition')
const proxy = TcpProxy.to(databaseUrl, 5432)
await proxy.start()
t.teardown(() => proxy.stop())

// One pooled connection: a slot the partition held would stall every later request.
const app = await build(t, {
  DATABASE_URL: proxy.via(databaseUrl),
  DATABASE_POOL_MAX: '1',
  DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
  DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
  DATABASE_CONNECT_TIMEOUT_MS: String(CONNECT_TIMEOUT_MS)
})
const user = await registerUser(app)
const listTasks = () => app.inject({ method: 'GET', url: '/tasks', headers: user.auth })

/** The settled value and how long it took, or `undefined` when it has not settled within `ms`. */
async function timed<T> (work: Promise<T>, ms: number): Promise<{ value: T, ms: number } | undefined> {
  const started = Date.now()
  const settled = work.then((value) => ({ value, ms: Date.now() - started }))
  return Promise.race([settled, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), ms))])
}

/** How many connections the service still holds open through the proxy, once a closed one has had a moment to register. */
async function openConnectionsSettled (): Promise<number> {
  for (let i = 0; i < 50 && proxy.openConnections > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
  return proxy.openConnections
}

/** Polls until the answer has the status (the pool recovers by itself; no fixed sleeps). */
async function eventually (status: number, tries = 40) {
  let last
  for (let i = 0; i < tries; i++) {
    last = await listTasks()
    if (last.statusCode === status) return last
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  return last!
}

t.test('a request whose query is on the wire when the network goes silent: 503 within the query timeout, the slot freed, recovery after', async (t) => {
  t.equal((await listTasks()).statusCode, 200, 'served before the partition')
  t.equal(proxy.openConnections, 1, 'one pooled connection')

  proxy.freeze()
  const frozen = await timed(listTasks(), QUERY_TIMEOUT_MS + 3000)
  const next = frozen && await timed(listTasks(), QUERY_TIMEOUT_MS + 3000)
  const openAfter = await openConnectionsSettled()
  proxy.thaw()

  t.ok(frozen, `answered (none within ${QUERY_TIMEOUT_MS + 3000} ms)`)
  if (frozen) {
    t.equal(frozen.value.statusCode, 503)
    t.same(json(frozen.value), { success: false, error: 'Service unavailable', code: 'SERVICE_UNAVAILABLE' })
    t.ok(frozen.ms < QUERY_TIMEOUT_MS + 1000, `within the query timeout (${frozen.ms} ms for ${QUERY_TIMEOUT_MS} ms)`)
  }
  t.ok(next, 'a following request is answered too')
  if (next) {
    t.equal(next.value.statusCode, 503, 'with 503')
    // On the freed slot it waits for a new connection (CONNECT_TIMEOUT_MS), not behind the hung query.
    t.ok(next.ms < QUERY_TIMEOUT_MS, `promptly, on the freed slot (${next.ms} ms; the connect timeout is ${CONNECT_TIMEOUT_MS} ms)`)
  }
  t.equal(openAfter, 0, 'the connection that timed out was closed by the service, not put back in the pool')

  t.equal((await eventually(200)).statusCode, 200, 'after the partition, requests succeed again')
})

t.test('a transaction whose query times out fails as "database unavailable" (503), and its connection is discarded', async (t) => {
  t.equal((await eventually(200)).statusCode, 200)
  const transaction = app.db.transaction().execute(async (tx) => {
    await sql`select 1`.execute(tx)
    proxy.freeze()
    await sql`select 2`.execute(tx)
  }).then(() => undefined, (err: Error) => err)
  const failed = await timed(transaction, QUERY_TIMEOUT_MS + 3000)
  const openAfter = await openConnectionsSettled()
  proxy.thaw()
  t.ok(failed?.value, `failed (${failed ? `after ${failed.ms} ms` : `still waiting after ${QUERY_TIMEOUT_MS + 3000} ms`})`)
  if (failed?.value) t.ok(isDatabaseUnavailable(failed.value), `as the database being unavailable: ${failed.value.message}`)
  if (failed) t.ok(failed.ms < QUERY_TIMEOUT_MS + 1000, `within the query timeout: the rollback does not wait on the hung connection (${failed.ms} ms)`)
  t.equal(openAfter, 0, 'its connection was closed')
  t.equal((await eventually(200)).statusCode, 200, 'and the pool recovers')
})

t.test('DATABASE_QUERY_TIMEOUT_MS: a second above the statement timeout unless set; never at or below it', async (t) => {
  const base = { NODE_ENV: 'test', AUTH_JWT_SECRET: TEST_SECRET, DATA_DIR: t.testdir() }
  t.equal(loadConfig(base).db.queryTimeoutMs, 16_000, 'the default follows DATABASE_STATEMENT_TIMEOUT_MS (15000)')
  t.equal(loadConfig({ ...base, DATABASE_STATEMENT_TIMEOUT_MS: '30000' }).db.queryTimeoutMs, 31_000)
  t.equal(loadConfig({ ...base, DATABASE_QUERY_TIMEOUT_MS: '20000' }).db.queryTimeoutMs, 20_000)
  for (const [env, line] of [
    [{ DATABASE_QUERY_TIMEOUT_MS: '15000' }, 'Invalid configuration: DATABASE_QUERY_TIMEOUT_MS must be above DATABASE_STATEMENT_TIMEOUT_MS (15000), so the server cancels a slow statement first'],
    [{ DATABASE_QUERY_TIMEOUT_MS: 'never' }, 'Invalid configuration: DATABASE_QUERY_TIMEOUT_MS must be milliseconds from 100 to 900000']
  ] as const) {
    t.throws(() => loadConfig({ ...base, ...env }), { name: 'ConfigError', message: line }, line)
  }
})
