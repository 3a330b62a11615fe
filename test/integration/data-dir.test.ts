// One process per embedded database directory (db/engine/data-dir-lock.ts), with real processes:
// a second server, or `npm run migrate`, beside a running server on the same DATA_DIR refuses
// to start with one line naming the directory and the process that holds it, and the first
// keeps serving what it stored; a holder killed with SIGKILL leaves a lock the next start
// takes over, and of two processes starting at once only one gets the directory.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { embeddedDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { ROOT } from '../support/paths.js'
import { freePort, startServer, waitUntilUp, type Running } from './process.js'

const PASSWORD = 'correct horse battery'

async function server (t: Test, env: Record<string, string>): Promise<Running> {
  const running = startServer({ PORT: String(await freePort()), AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', ...env })
  // Gone before the test's directory is removed: a process still writing there made the
  // removal fail (ENOTEMPTY), and the servers left running held the file past its timeout.
  t.teardown(async () => {
    running.child.kill('SIGKILL')
    await running.exited
  })
  return running
}

/** 'serving' once /health answers, or the exit code if the process ends first. */
const outcome = (running: Running): Promise<'serving' | number | null> =>
  waitUntilUp(running).then(() => 'serving' as const, () => running.exited)

const post = async (base: string, path: string, body: unknown) => (await fetch(`${base}${path}`, {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body)
})).status

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
/** The one line a refused process prints. */
const refusal = (dataDir: string, holder: number | undefined) =>
  new RegExp(`^Data directory in use: the embedded database in ${escape(join(dataDir, 'pglite'))} is held by process ${holder} \\(server\\.js\\) on host ${escape(hostname())} since \\S+: stop it, or give this process another DATA_DIR$`)

t.test('a second server on the same DATA_DIR refuses to start with one line naming the directory and the holder; the first keeps serving', async (t) => {
  const env = await embeddedDatabaseEnv(t)
  const first = await server(t, env)
  await waitUntilUp(first)

  const second = await server(t, env)
  t.equal(await outcome(second), 1, 'the second exits 1', { output: second.output() })
  t.match(second.output().trim(), refusal(env.DATA_DIR, first.child.pid), 'one line, no stack')

  const email = uniqueEmail('kept')
  t.equal(await post(first.base, '/auth/register', { email, password: PASSWORD }), 201, 'the first keeps serving')
  first.child.kill('SIGTERM')
  t.equal(await first.exited, 0)
  const restarted = await server(t, env)
  await waitUntilUp(restarted)
  t.equal(await post(restarted.base, '/auth/login', { email, password: PASSWORD }), 200, 'the account is there after a restart')
})

t.test('npm run migrate beside a running server refuses in one line; the server keeps serving', async (t) => {
  const env = await embeddedDatabaseEnv(t)
  const running = await server(t, env)
  await waitUntilUp(running)

  // What `npm run migrate` runs, compiled as the image runs it (node dist/scripts/migrate.js).
  const migrate = spawn(process.execPath, ['scripts/migrate.js'], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', ...env }, stdio: ['ignore', 'pipe', 'pipe']
  })
  t.teardown(() => { migrate.kill('SIGKILL') })
  let output = ''
  migrate.stdout.on('data', (chunk) => { output += chunk })
  migrate.stderr.on('data', (chunk) => { output += chunk })
  const [code] = await once(migrate, 'exit')
  t.equal(code, 1, 'exits 1', { output })
  t.match(output.trim(), refusal(env.DATA_DIR, running.child.pid))
  t.equal((await fetch(`${running.base}/ready`)).status, 200, 'the server is still ready')
  t.equal(await post(running.base, '/auth/register', { email: uniqueEmail('after-migrate'), password: PASSWORD }), 201)
})

t.test('two servers started together on a fresh DATA_DIR: one initialises and serves, the other refuses', async (t) => {
  const env = { DATA_DIR: await mkdtemp(join(tmpdir(), 'data-dir-fresh-')) }
  // Teardowns run last added first: the servers are killed and gone, then their directory.
  t.teardown(() => rm(env.DATA_DIR, { recursive: true, force: true }))
  const both = [await server(t, env), await server(t, env)]
  const outcomes = await Promise.all(both.map(outcome))
  t.same([...outcomes].sort(), [1, 'serving'], 'one serves, one exits 1', { outputs: both.map((s) => s.output()) })
  const winner = both[outcomes.indexOf('serving')]!
  const loser = both[outcomes.indexOf(1)]!
  t.match(loser.output().trim(), refusal(env.DATA_DIR, winner.child.pid))
  t.equal(await post(winner.base, '/auth/register', { email: uniqueEmail('fresh'), password: PASSWORD }), 201)
})

t.test('a server killed with SIGKILL leaves a lock the next start takes over; of two starting at once, one does', async (t) => {
  const env = await embeddedDatabaseEnv(t)
  const killed = await server(t, env)
  await waitUntilUp(killed)
  const email = uniqueEmail('survivor')
  t.equal(await post(killed.base, '/auth/register', { email, password: PASSWORD }), 201)
  killed.child.kill('SIGKILL')
  await killed.exited

  const both = [await server(t, env), await server(t, env)]
  const outcomes = await Promise.all(both.map(outcome))
  t.same([...outcomes].sort(), [1, 'serving'], 'one takes the lock over and serves, the other exits 1', { outputs: both.map((s) => s.output()) })
  const winner = both[outcomes.indexOf('serving')]!
  t.match(both[outcomes.indexOf(1)]!.output().trim(), refusal(env.DATA_DIR, winner.child.pid), 'naming the new holder, not the dead one')
  t.equal(await post(winner.base, '/auth/login', { email, password: PASSWORD }), 200, 'what the killed server stored is there')
})
