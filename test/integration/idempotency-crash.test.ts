// An instance killed (SIGKILL) in the middle of a keyed POST /tasks, on PostgreSQL: while
// its transaction lives, another instance answers a retry with 409; once PostgreSQL has
// ended it, nothing of it is left and the retry creates the task, once. (Runs against
// DATABASE_URL's server, or the local one.)
import { randomUUID } from 'node:crypto'
import t from 'tap'
import pg from 'pg'
import { build, json, registerUser, serverDatabase, TEST_SECRET, until } from '../support/helper.js'
import { freePort, startServer, waitUntilUp } from './process.js'

const { url: databaseUrl, name, admin } = await serverDatabase(t, 'idem_crash')
const env = { DATABASE_URL: databaseUrl.toString(), RATE_LIMIT_MAX: '0', AUTH_RATE_LIMIT_MAX: '0', BCRYPT_ROUNDS: '4' }
const survivor = await build(t, env)
const port = await freePort()
// The survivor's audience (API_URL), so one instance's token works on the other.
const doomed = startServer({ ...env, PORT: String(port), AUTH_JWT_SECRET: TEST_SECRET, API_URL: survivor.config.http.apiUrl })
t.teardown(() => { doomed.child.kill('SIGKILL') })
await waitUntilUp(doomed)

/** The doomed instance's backend blocked on the task insert, if any. */
async function blockedInsert (): Promise<number | undefined> {
  const { rows } = await admin.query<{ pid: number }>(
    "select pid from pg_stat_activity where datname = $1 and wait_event_type = 'Lock' and query like '%insert into \"tasks\"%'", [name])
  return rows[0]?.pid
}

t.test('killed mid-request: a retry elsewhere is 409 while its transaction lives, then creates the task once', async (t) => {
  const user = await registerUser(survivor)
  const key = randomUUID()
  const task = { title: 'Survive the crash' }
  // Inserts into tasks wait behind this lock: the doomed request stops inside its transaction,
  // after it took the key.
  const locker = new pg.Client({ connectionString: databaseUrl.toString() })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query('lock table tasks in exclusive mode')

  const inFlight = fetch(`${doomed.base}/tasks`, {
    method: 'POST',
    headers: { ...user.auth, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(task)
  }).then((res) => res.status, () => 'no answer')
  let pid: number | undefined
  await until(async () => (pid = await blockedInsert()) !== undefined, 'the doomed request to reach its insert')

  const during = await survivor.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'idempotency-key': key }, payload: task })
  t.equal(during.statusCode, 409, 'the key is held by the transaction in flight on the other instance')
  t.equal(json(during).code, 'IDEMPOTENCY_KEY_IN_USE')

  doomed.child.kill('SIGKILL')
  await doomed.exited
  t.equal(await inFlight, 'no answer', 'the client of the killed instance got no answer')
  // PostgreSQL ends the dead client's transaction once its statement stops waiting.
  await locker.query('commit')
  await until(async () => (await admin.query('select 1 from pg_stat_activity where pid = $1', [pid])).rowCount === 0, 'the dead instance\'s backend to end')

  const retry = await survivor.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'idempotency-key': key }, payload: task })
  t.equal(retry.statusCode, 201)
  t.equal(retry.headers['idempotent-replayed'], undefined, 'carried out: nothing of the killed attempt was kept')
  const stored = await survivor.db.selectFrom('tasks').select('id').where('user_id', '=', user.id).execute()
  t.same(stored, [{ id: json(retry).data.id }], 'one task')
  const again = await survivor.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'idempotency-key': key }, payload: task })
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.body, retry.body)
})
