// server.ts as a real process on a real socket: configuration errors at start-up,
// the auth cookie in a round trip, and graceful shutdown with a request in flight.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { productionNodeFlags } from '../../production-flags.js'
import { embeddedDatabaseEnv, testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { freePort, startServer, waitUntilUp } from './process.js'

t.test('the Dockerfile starts node with the flags of npm start', async (t) => {
  const cmd = /^CMD (\[.*\])$/m.exec(readFileSync(join(PROJECT_ROOT, 'Dockerfile'), 'utf8'))?.[1]
  t.ok(cmd, 'a CMD in exec form')
  t.same(JSON.parse(cmd ?? '[]'), ['node', ...productionNodeFlags(PROJECT_ROOT), 'dist/server.js'])
  t.ok(productionNodeFlags(PROJECT_ROOT).includes('--no-allocation-site-pretenuring'))
})

t.test('a bad setting stops start-up with one line naming the variable', async (t) => {
  for (const [env, line] of [
    [{ AUTH_JWT_SECRET: 'x'.repeat(31) }, 'Invalid configuration: AUTH_JWT_SECRET must be at least 32 characters'],
    [{ AUTH_JWT_SECRET: TEST_SECRET, DATABASE_URL: 'mysql://localhost/db' }, 'Invalid configuration: DATABASE_URL must be a postgres:// or postgresql:// URL'],
    [{ NODE_ENV: 'production' }, 'Invalid configuration: AUTH_JWT_SECRET is required in production (at least 32 characters)']
  ] as const) {
    const server = startServer({ PORT: '0', DATA_DIR: t.testdir(), ...env })
    t.equal(await server.exited, 1, line)
    t.equal(server.output().trim(), line)
  }
})

t.test('real socket: cookie sign-in round trip, then SIGTERM lets the in-flight request finish', async (t) => {
  const port = await freePort()
  const server = startServer({ PORT: String(port), AUTH_JWT_SECRET: TEST_SECRET, ...await testDatabaseEnv(t) })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)

  const email = uniqueEmail('socket')
  const registered = await fetch(`${server.base}/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: 'correct horse battery' })
  })
  t.equal(registered.status, 201)
  // The auth cookie first, then the device cookie of the sign-in limits.
  const [setCookie = '', device = ''] = registered.headers.getSetCookie()
  t.match(setCookie, /^auth_token=[\w-]+\.[\w-]+\.[\w-]+; Max-Age=604800; Path=\/; HttpOnly; SameSite=Lax$/)
  t.match(device, /^sign_in_device=[\w-]{22}\.[\w-]{43}; Max-Age=15552000; Path=\/; HttpOnly; SameSite=Lax$/)
  const cookie = setCookie.split(';')[0]!

  const me = await fetch(`${server.base}/auth/me`, { headers: { cookie } })
  t.equal(me.status, 200)
  t.equal(((await me.json()) as { data: { email: string } }).data.email, email)

  const loggedOut = await fetch(`${server.base}/auth/logout`, { method: 'POST', headers: { cookie } })
  t.equal(loggedOut.status, 200)
  t.match(loggedOut.headers.get('set-cookie'), /^auth_token=; Max-Age=0; Path=\/; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax$/)
  t.equal((await fetch(`${server.base}/auth/me`, { headers: { cookie } })).status, 401, 'the cookie token is revoked')

  // A login spends ~0.5 s in bcrypt: SIGTERM lands while it is in flight.
  const inFlight = fetch(`${server.base}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: 'correct horse battery' })
  })
  await new Promise((resolve) => setTimeout(resolve, 100))
  const signalledAt = Date.now()
  server.child.kill('SIGTERM')
  const answer = await inFlight
  t.equal(answer.status, 200, 'the in-flight request completes')
  t.equal(((await answer.json()) as { success: boolean }).success, true)
  t.equal(await server.exited, 0, 'exits cleanly', { output: server.output() })
  t.ok(Date.now() - signalledAt < 10_000, 'within 10 s')
  await t.rejects(fetch(`${server.base}/health`), 'no longer accepting connections')
  t.match(server.output(), /shutting down/)
})

t.test('the embedded database\'s thread dies: the server stops, exiting non-zero, instead of hanging', async (t) => {
  const port = await freePort()
  const server = startServer({ PORT: String(port), AUTH_JWT_SECRET: TEST_SECRET, ...await embeddedDatabaseEnv(t) }, ['./test/integration/crash-database-thread.js'])
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  t.equal((await fetch(`${server.base}/ready`)).status, 200)
  const crashedAt = Date.now()
  server.child.kill('SIGWINCH')
  t.equal(await server.exited, 1, 'exits with code 1, for its supervisor to restart it', { output: server.output() })
  t.ok(Date.now() - crashedAt < 10_000, 'within 10 s')
  t.match(server.output(), /the embedded database failed: closing/)
})
