// The mail sender alone, without the app: a database, the real SMTP sink, and runOnce()
// where a test of the whole app waits for the sender's next pass.
import { randomUUID } from 'node:crypto'
import { sql } from 'kysely'
import t from 'tap'
import { createDatabase } from '../../db/engine/connect.js'
import { findUserForEmailToken } from '../../db/email-tokens.js'
import { migrateToLatest } from '../../db/engine/migrate.js'
import type { Database } from '../../db/types.js'
import type { Logger } from '../../jobs/scheduler.js'
import { linkKeyFrom, type OutboxContext } from '../../mail/outbox.js'
import { hashToken } from '../../token-hash.js'
import { MailQueue } from '../../mail/queue.js'
import { MailSender, type MailSenderOptions } from '../../mail/sender.js'
import { logTransport, smtpTransport } from '../../mail/transports.js'
import { testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const env = await testDatabaseEnv(t)
const handle = createDatabase<Database>({ url: env.DATABASE_URL, dataDir: env.DATA_DIR ?? '' })
t.teardown(() => handle.close())
await migrateToLatest(handle.db)
const { db } = handle

const sink = await startSmtpSink(0, { rejectRecipients: /^refused-/ })
t.teardown(() => sink.close())
const smtp = smtpTransport(sink.url, 'Task App <no-reply@example.com>')
t.teardown(() => smtp.close())

const context: OutboxContext = { appUrl: 'http://localhost:3000', product: 'Task App', linkKey: linkKeyFrom(TEST_SECRET) }
const logged: Array<{ level: string, msg: string, obj: object }> = []
const log: Logger = Object.fromEntries(['debug', 'info', 'warn', 'error'].map((level) =>
  [level, (obj: object, msg: string) => { logged.push({ level, msg, obj }) }])) as unknown as Logger

/** A sender that is never started: passes run only when a test calls runOnce(). */
function newSender (options: Partial<MailSenderOptions> = {}) {
  const sender = new MailSender({ db, context, deliver: smtp.deliver, log, pollIntervalMs: 60_000, retryBaseMs: 60_000, giveUpMs: 86_400_000, ...options })
  t.teardown(() => sender.stop())
  return sender
}

/** Counts its wakes instead of passing them on. */
class CountingSender extends MailSender {
  wakes = 0
  delays: number[] = []
  override wake (delayMs = 0): void {
    this.wakes++
    this.delays.push(delayMs)
  }
}

async function newUser (email = uniqueEmail('sender')) {
  return db.insertInto('users').values({ id: randomUUID(), email, password: 'x', updated_at: new Date() })
    .returning(['id', 'email']).executeTakeFirstOrThrow()
}
const outboxOf = (userId: string) => db.selectFrom('email_outbox').selectAll().where('user_id', '=', userId).execute()

t.test('a welcome queued in a transaction is sent by runOnce, with a working link, and its row blanked', async (t) => {
  const sender = newSender()
  const queue = new MailQueue(db, context, sender)
  const user = await newUser()
  await queue.transaction((tx, outbox) => outbox.welcome(user))
  await sender.runOnce()
  const mail = sink.received.find((m) => m.to === user.email)
  t.ok(mail, 'delivered by the time runOnce resolves')
  t.match(mail!.subject, /^Welcome/)
  t.match(mail!.link, /^http:\/\/localhost:3000\/verify-email\?token=[\w-]{43}$/)
  t.equal((await findUserForEmailToken(db, hashToken(mail!.token!), 'email_verification'))?.id, user.id, 'its token is live for the user')
  const [row] = await outboxOf(user.id)
  t.ok(row!.sent_at, 'marked sent')
  t.same([row!.text_body, row!.html_body, row!.link_nonce], [null, null, null], 'bodies and nonce blanked')
})

t.test('without SMTP_URL the message is logged with its link, and the log never says it was sent', async (t) => {
  const sender = newSender({ deliver: logTransport(log) })
  const queue = new MailQueue(db, context, sender)
  const user = await newUser()
  await queue.transaction((tx, outbox) => outbox.welcome(user))
  const from = logged.length
  await sender.runOnce()
  const lines = logged.slice(from)
  t.match(lines, [{ msg: 'email (SMTP_URL is not set: logged, not sent)', obj: { to: user.email, link: /verify-email\?token=/ } }], 'the transport logs it with its link')
  t.ok(lines.some((line) => line.msg === 'email logged, not sent (SMTP_URL is not set)'), 'the sender says the same')
  t.notOk(lines.some((line) => /\bsent\b/.test(line.msg) && !/not sent/.test(line.msg)), 'and no line says it was sent')
  t.notOk(sink.received.some((m) => m.to === user.email), 'nothing reached a mail server')
})

t.test('the queue wakes the sender once after a commit that queued mail, and never on a rollback or an empty transaction', async (t) => {
  const sender = new CountingSender({ db, context, deliver: smtp.deliver, log, pollIntervalMs: 60_000, retryBaseMs: 60_000, giveUpMs: 86_400_000 })
  const queue = new MailQueue(db, context, sender)
  const user = await newUser()

  await t.rejects(queue.transaction(async (tx, outbox) => {
    await outbox.passwordChanged(user)
    throw new Error('rolled back')
  }), /rolled back/)
  t.equal(sender.wakes, 0, 'no wake on a rollback')
  t.same(await outboxOf(user.id), [], 'and nothing queued')

  t.equal(await queue.transaction(async () => 'nothing to send'), 'nothing to send', 'the result is passed on')
  t.equal(sender.wakes, 0, 'no wake when nothing was queued')

  let wakesInside = -1
  await queue.transaction(async (tx, outbox) => {
    await outbox.verification(user)
    await outbox.emailChanged(user, 'old@example.com', user.email)
    wakesInside = sender.wakes
  })
  t.equal(wakesInside, 0, 'not woken before the commit')
  t.equal(sender.wakes, 1, 'woken once after it')
  t.equal((await outboxOf(user.id)).length, 2)
})

t.test('forgot in the background: a link only for an account, then a wake a moment later', async (t) => {
  const sender = new CountingSender({ db, context, deliver: smtp.deliver, log, pollIntervalMs: 60_000, retryBaseMs: 60_000, giveUpMs: 86_400_000 })
  const queue = new MailQueue(db, context, sender)
  const user = await newUser()
  const before = await db.selectFrom('email_outbox').select(sql<number>`count(*)::int`.as('n')).executeTakeFirstOrThrow()
  queue.inBackground('test', (outbox) => outbox.passwordResetIfAccount(uniqueEmail('nobody')))
  queue.inBackground('test', (outbox) => outbox.passwordResetIfAccount(user.email))
  await sender.stop() // waits for the background work
  const after = await db.selectFrom('email_outbox').select(sql<number>`count(*)::int`.as('n')).executeTakeFirstOrThrow()
  t.equal(after.n - before.n, 1, 'one message: the account\'s')
  t.same((await outboxOf(user.id)).map((row) => row.kind), ['password_reset'])
  t.equal(sender.wakes, 2, 'woken after each, whether or not it queued a message')
  t.ok(sender.delays.every((ms) => ms >= 200 && ms < 1_000), `each 200 ms to 1 s later (${sender.delays.join(', ')} ms)`)
})

t.test('a failed send is retried with backoff; runOnce sends it once it is due', async (t) => {
  const down = smtpTransport('smtp://127.0.0.1:1', 'Task App <no-reply@example.com>')
  t.teardown(() => down.close())
  const failing = newSender({ deliver: down.deliver, retryBaseMs: 60_000 })
  const user = await newUser()
  await new MailQueue(db, context, failing).transaction((tx, outbox) => outbox.passwordChanged(user))
  await failing.runOnce()
  let [row] = await outboxOf(user.id)
  t.equal(row!.sent_at, null)
  t.equal(Number(row!.attempts), 1)
  t.ok(row!.last_error, 'the error is kept')
  const wait = await db.selectFrom('email_outbox').select(sql<number>`extract(epoch from next_attempt_at - now())::float8`.as('s')).where('id', '=', row!.id).executeTakeFirstOrThrow()
  t.ok(wait.s > 50 && wait.s <= 60, `retried after EMAIL_RETRY_BASE_MS (in ${wait.s} s)`)
  t.ok(logged.some((entry) => entry.msg === 'email not sent: will retry'), 'logged at warn')

  const sender = newSender()
  await sender.runOnce()
  t.notOk(sink.received.some((m) => m.to === user.email), 'not due yet: not sent')
  await db.updateTable('email_outbox').set({ next_attempt_at: sql`now()` }).where('id', '=', row!.id).execute()
  await sender.runOnce()
  t.ok(sink.received.some((m) => m.to === user.email), 'sent once due')
  ;[row] = await outboxOf(user.id)
  t.equal(Number(row!.attempts), 2)
  t.ok(row!.sent_at)
})

t.test('a permanent refusal (5xx) is given up at once, with its error recorded', async (t) => {
  const sender = newSender()
  const user = await newUser(uniqueEmail('refused'))
  await new MailQueue(db, context, sender).transaction((tx, outbox) => outbox.passwordChanged(user))
  await sender.runOnce()
  const [row] = await outboxOf(user.id)
  t.ok(row!.failed_at, 'given up')
  t.match(row!.last_error, /No such mailbox/)
  t.equal(row!.sent_at, null)
})

t.test('stop() lets a send in flight finish for a while, then aborts it and leaves the row to the next sender', async (t) => {
  const sender = newSender()
  const user = await newUser()
  await new MailQueue(db, context, sender).transaction((tx, outbox) => outbox.passwordChanged(user))
  sink.hold()
  const arrived = new Promise<void>((resolve) => sink.onData(resolve))
  const pass = sender.runOnce()
  await arrived
  await sender.stop()
  await pass
  sink.release(true)
  const [row] = await outboxOf(user.id)
  t.equal(row!.sent_at, null, 'not recorded as sent')
  t.equal(row!.last_error, 'interrupted by shutdown')
  t.equal(row!.locked_until, null, 'free for the next sender')
  t.ok(logged.some((entry) => entry.msg === 'email send interrupted by shutdown: left for the next sender'))
  await sender.runOnce()
  t.equal((await outboxOf(user.id))[0]!.sent_at, null, 'a stopped sender sends nothing more')
})
