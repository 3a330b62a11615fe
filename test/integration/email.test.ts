// The email outbox under the conditions a single process cannot show: two instances on one
// PostgreSQL database sharing the queue (each message sent exactly once), and the service
// stopped with SIGTERM while a message is on the wire (nothing lost, nothing doubled), or
// killed with SIGKILL then (sent again once its lease ends, within a minute).
import { once } from 'node:events'
import { sql } from 'kysely'
import t from 'tap'
import { createDatabase } from '../../db/engine/connect.js'
import type { Database } from '../../db/types.js'
import { queueEmail } from '../../db/email-outbox.js'
import { build, registerUser, serverDatabase, testDatabaseEnv, TEST_SECRET, uniqueEmail, until } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { freePort, startServer, waitUntilUp, type Running } from './process.js'

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

/** Signs up `email` on the server at `base`; the welcome email is queued with the account. */
const register = async (base: string, email: string): Promise<number> => (await fetch(`${base}/auth/register`, {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: 'correct horse battery' })
})).status
t.test('two instances on one PostgreSQL database send each queued email exactly once', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const { url } = await serverDatabase(t, 'email')
  const env = { DATABASE_URL: url.toString(), SMTP_URL: sink.url, EMAIL_POLL_INTERVAL_MS: '100', EMAIL_RETRY_BASE_MS: '100' }
  const [a, b] = await Promise.all([build(t, env), build(t, env)]) as [Awaited<ReturnType<typeof build>>, Awaited<ReturnType<typeof build>>]

  // Welcomes queued through both instances, and a burst written at once that both senders race for.
  const users = await Promise.all(Array.from({ length: 10 }, (_, i) => registerUser(i % 2 === 0 ? a : b)))
  const burst = Array.from({ length: 60 }, () => uniqueEmail('burst'))
  await a.db.transaction().execute(async (tx) => {
    for (const recipient of burst) {
      await queueEmail(tx, { userId: null, kind: 'test', recipient, subject: 'Burst', text: 'hello', html: '<p>hello</p>', linkNonce: null })
    }
  })
  a.mail.wake()
  b.mail.wake()

  const expected = [...users.map((u) => u.email), ...burst]
  await until(() => expected.every((email) => sink.received.some((m) => m.to === email)), 'every email to arrive')
  await until(async () => (await a.db.selectFrom('email_outbox').select('id').where('sent_at', 'is', null).execute()).length === 0, 'every row marked sent')
  // Both senders poll every 100 ms: a second send would have happened by now.
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const counts = new Map<string, number>()
  for (const mail of sink.received) counts.set(mail.to, (counts.get(mail.to) ?? 0) + 1)
  t.same(expected.filter((email) => counts.get(email) !== 1), [], 'no email missing or sent twice')
  t.equal(sink.received.length, expected.length)
  const rows = await a.db.selectFrom('email_outbox').select(['attempts', 'sent_at']).execute()
  t.ok(rows.every((row) => row.attempts === 1 && row.sent_at !== null), 'each row claimed once')
})

t.test('SIGTERM while an email is on the wire: the send is cut off and retried after the restart, once', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const database = await testDatabaseEnv(t)
  const env = { AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', SMTP_URL: sink.url, EMAIL_POLL_INTERVAL_MS: '200', EMAIL_RETRY_BASE_MS: '100', ...database }
  const start = async (): Promise<Running> => {
    const server = startServer({ PORT: String(await freePort()), ...env })
    t.teardown(() => { server.child.kill('SIGKILL') })
    await waitUntilUp(server)
    return server
  }

  sink.hold()
  const arrived = new Promise<void>((resolve) => sink.onData(resolve))
  const first = await start()
  const email = uniqueEmail('sigterm')
  t.equal(await register(first.base, email), 201)
  await arrived
  // The message's data is at the server, its answer held: the send is in flight.
  first.child.kill('SIGTERM')
  t.equal(await first.exited, 0, 'exits cleanly', { output: first.output() })
  t.match(first.output(), /email send interrupted by shutdown/)
  sink.release(true)
  t.equal(sink.received.length, 0, 'not delivered yet')

  const second = await start()
  const mail = await sink.waitFor((m) => m.to === email)
  t.match(mail.subject, /^Welcome/)
  second.child.kill('SIGTERM')
  t.equal(await second.exited, 0)
  t.equal(sink.received.filter((m) => m.to === email).length, 1, 'delivered once')
  t.notMatch(first.output() + second.output(), /token=/, 'no link in the logs when SMTP is configured')
})

t.test('SIGKILL while an email is on the wire: the lease ends within a minute, and the restarted service sends it then', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const database = await testDatabaseEnv(t)
  // The default poll interval (30 s): the restarted sender looks again when the lease ends.
  const env = { AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', SMTP_URL: sink.url, ...database }
  const start = async (): Promise<Running> => {
    const server = startServer({ PORT: String(await freePort()), ...env })
    t.teardown(() => { server.child.kill('SIGKILL') })
    await waitUntilUp(server)
    return server
  }
  const stored = async () => {
    const handle = createDatabase<Database>({ url: database.DATABASE_URL, dataDir: database.DATA_DIR ?? '' })
    try {
      const row = await handle.db.selectFrom('email_outbox')
        .select(['attempts', 'sent_at', sql<number>`extract(epoch from locked_until - now()) * 1000`.as('leaseLeftMs')])
        .where('recipient', '=', email).executeTakeFirstOrThrow()
      return { ...row, leaseLeftMs: Number(row.leaseLeftMs) }
    } finally {
      await handle.close()
    }
  }

  sink.hold()
  const arrived = new Promise<void>((resolve) => sink.onData(resolve))
  const first = await start()
  const email = uniqueEmail('sigkill')
  t.equal(await register(first.base, email), 201)
  await arrived
  // The message's data is at the server, its answer held: the send is in flight.
  first.child.kill('SIGKILL')
  await first.exited
  sink.release(true)

  const killed = await stored()
  t.match(killed, { attempts: 1, sent_at: null }, 'claimed once, not recorded as sent')
  t.ok(killed.leaseLeftMs > 0 && killed.leaseLeftMs <= 60_000, `the lease ends within a minute (${Math.round(killed.leaseLeftMs)} ms left)`)

  const second = await start()
  // Sent when the lease ends (not at the next poll, 30 s later), give or take a busy machine.
  const mail = await sink.waitFor((m) => m.to === email, killed.leaseLeftMs + 15_000)
  t.match(mail.subject, /^Welcome/)
  second.child.kill('SIGTERM')
  t.equal(await second.exited, 0)
  t.equal(sink.received.filter((m) => m.to === email).length, 1, 'delivered once: the first try was dropped by the server')
  t.match(await stored(), { attempts: 2, sent_at: ISO })
})

t.test('SIGTERM while an email is on the wire: a send that finishes in time is not repeated', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const database = await testDatabaseEnv(t)
  const env = { AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', SMTP_URL: sink.url, EMAIL_POLL_INTERVAL_MS: '200', ...database }
  const server = startServer({ PORT: String(await freePort()), ...env })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  sink.hold()
  const arrived = new Promise<void>((resolve) => sink.onData(resolve))
  const email = uniqueEmail('graceful')
  t.equal(await register(server.base, email), 201)
  await arrived
  server.child.kill('SIGTERM')
  await new Promise((resolve) => setTimeout(resolve, 500))
  sink.release()
  t.equal(await server.exited, 0)
  t.equal(sink.received.filter((m) => m.to === email).length, 1)

  const handle = createDatabase<Database>({ url: database.DATABASE_URL, dataDir: database.DATA_DIR ?? '' })
  t.teardown(() => handle.close())
  const rows = await handle.db.selectFrom('email_outbox').select(['sent_at', 'attempts']).where('recipient', '=', email).execute()
  t.equal(rows.length, 1)
  t.ok(rows[0]!.sent_at, 'recorded as sent before the process ended: no restart sends it again')
})

t.test('without SMTP_URL, outside production, each email is written to the log with its link', async (t) => {
  const server = startServer({ PORT: String(await freePort()), AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', ...await testDatabaseEnv(t) })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const email = uniqueEmail('logged')
  await fetch(`${server.base}/auth/register`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: 'correct horse battery' })
  })
  await until(() => server.output().includes('verify-email?token='), 'the email in the log')
  const line = server.output().split('\n').find((l) => l.includes('verify-email?token='))!
  t.match(JSON.parse(line), { to: email, subject: /^Welcome/, link: /^http:\/\/localhost:3000\/verify-email\?token=[\w-]{43}$/ })
  server.child.kill('SIGTERM')
  await once(server.child, 'exit')
})

t.test('without SMTP_URL in production: starts, warns once, and keeps the emails queued', async (t) => {
  const database = await testDatabaseEnv(t)
  const server = startServer({ PORT: String(await freePort()), NODE_ENV: 'production', AUTH_JWT_SECRET: TEST_SECRET, EMAIL_POLL_INTERVAL_MS: '100', ...database })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const email = uniqueEmail('queued')
  t.equal(await register(server.base, email), 201)
  // Several poll intervals pass.
  await new Promise((resolve) => setTimeout(resolve, 1000))
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0)
  const warnings = server.output().split('\n').filter((line) => line.includes('SMTP_URL is not set'))
  t.equal(warnings.length, 1, 'one warning')
  t.equal(JSON.parse(warnings[0]!).level, 40, 'at warn')
  t.notMatch(server.output(), /token=/, 'no link in a production log')

  const handle = createDatabase<Database>({ url: database.DATABASE_URL, dataDir: database.DATA_DIR ?? '' })
  t.teardown(() => handle.close())
  const rows = await handle.db.selectFrom('email_outbox').select(['sent_at', 'attempts', 'subject', 'text_body', 'link_nonce']).where('recipient', '=', email).execute()
  t.equal(rows.length, 1)
  t.match(rows[0], { sent_at: null, attempts: 0, subject: /^Welcome/, link_nonce: /^[\w-]{43}$/ }, 'still queued for when SMTP_URL is set')
  t.equal(rows[0]!.text_body, null, 'no link at rest: the body is rendered when it is sent')
})
