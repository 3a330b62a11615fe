// Security round four, row 2: no inbox floodable through the account routes. Every mail the
// account routes send to an address counts against its hourly cap (EMAIL_LINK_MAX_PER_HOUR):
// past it a link is not sent, and a security notice is held and sent with the others held for
// that address in one digest when the hour ends, so the owner still learns what happened.
// Through a real SMTP server: what is counted is what arrived.
import { sql } from 'kysely'
import t from 'tap'
import { build, json, randomAddress, registerUser, uniqueEmail, type TestUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const CAP = 3
const sink = await startSmtpSink()
t.teardown(() => sink.close())
// Password checks generous enough not to be what stops these floods (rate-limits.test.ts tests those).
const app = await build(t, { SMTP_URL: sink.url, EMAIL_LINK_MAX_PER_HOUR: String(CAP), AUTH_RATE_LIMIT_MAX: '100' })

const received = (email: string) => sink.received.filter((m) => m.envelope.includes(email))
/** Sends every message due; held ones stay queued until their hour ends. */
const sendDue = () => app.mail.sender.runOnce()
/** The hour of `email`'s held notices ends now (as the clock would have it an hour later). */
const endTheHourOf = (email: string) =>
  app.db.updateTable('email_outbox').set({ next_attempt_at: sql`now()` }).where('recipient', '=', email).where('digest', '=', true).where('sent_at', 'is', null).execute()

t.test('16 email changes from 2 client addresses put at most the cap\'s mails in the victim\'s inbox', async (t) => {
  const victim = uniqueEmail('victim')
  const attacker = await registerUser(app)
  const clients = [randomAddress(), randomAddress()]
  const change = (email: string, i: number) => app.inject({
    method: 'PATCH', url: '/account/profile', headers: attacker.auth, remoteAddress: clients[i % 2], payload: { email, currentPassword: attacker.password }
  })
  for (let i = 0; i < 16; i++) {
    const res = await change(victim, i)
    t.equal(res.statusCode, 200, `change ${i + 1}: answered as ever`)
    t.equal(json(res).data.pendingEmail, victim)
    // Sent at once, as a running sender would; then back to the attacker's own address, to ask again.
    await sendDue()
    t.equal((await change(attacker.email, i)).statusCode, 200)
  }
  const inbox = received(victim)
  t.equal(inbox.length, CAP, `${CAP} mails reached the inbox, not 16`)
  t.ok(inbox.every((m) => /^Verify your email/.test(m.subject)), 'each a verification link')
  const queued = await app.db.selectFrom('email_outbox').select('id').where('recipient', '=', victim).execute()
  t.equal(queued.length, CAP, 'the links past the cap were never queued: none waits to flood it later')
})

t.test('12 password changes on an account at the victim\'s address: the cap\'s mails, then one digest of the rest', async (t) => {
  const victim = uniqueEmail('victim')
  let user: TestUser = await registerUser(app, { email: victim, password: 'password number 0' })
  for (let i = 1; i <= 12; i++) {
    const res = await app.inject({
      method: 'PATCH', url: '/account/profile', headers: user.auth, remoteAddress: randomAddress(), payload: { currentPassword: user.password, newPassword: `password number ${i}` }
    })
    t.equal(res.statusCode, 200, `change ${i}`)
    user = { ...user, password: `password number ${i}`, token: json(res).token, auth: { authorization: `Bearer ${json(res).token}` } }
  }
  await sendDue()
  const now = received(victim)
  t.same(now.map((m) => m.subject.replace(/ - .*$/, '')), ['Welcome! Please verify your email', 'Your password was changed', 'Your password was changed'],
    'the welcome and two notices: the hour\'s three')

  const held = await app.db.selectFrom('email_outbox').select(['kind', 'next_attempt_at']).where('recipient', '=', victim).where('digest', '=', true).execute()
  t.equal(held.length, 10, 'the ten other notices are held')
  t.ok(held.every((row) => Date.parse(row.next_attempt_at) > Date.now() + 50 * 60_000), 'until the hour ends')

  await endTheHourOf(victim)
  await sendDue()
  const after = received(victim)
  t.equal(after.length, 4, 'then exactly one more message')
  const digest = after[3]!
  t.match(digest.subject, /^10 security notices for your account/)
  t.equal(digest.text.match(/Your password was changed/g)?.length, 10, 'it tells each of the ten')
  t.equal(digest.token, undefined, 'and carries no link')
  const rows = await app.db.selectFrom('email_outbox').select(['sent_at', 'text_body']).where('recipient', '=', victim).where('digest', '=', true).execute()
  t.ok(rows.every((row) => row.sent_at !== null && row.text_body === null), 'every held row is marked sent and blanked')
  await sendDue()
  t.equal(received(victim).length, 4, 'and nothing is sent twice')
})

t.test('a link asked for past the cap is not sent; a notice past it is held, not lost', async (t) => {
  const user = await registerUser(app)
  // The welcome was the first of three.
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: '/auth/email/verification', headers: user.auth, remoteAddress: randomAddress() })).statusCode, 202)
  const extra = await app.inject({ method: 'POST', url: '/auth/email/verification', headers: user.auth, remoteAddress: randomAddress() })
  t.equal(extra.statusCode, 202, 'the same answer past the cap')
  const changed = await app.inject({
    method: 'PATCH', url: '/account/profile', headers: user.auth, remoteAddress: randomAddress(), payload: { currentPassword: user.password, newPassword: 'a later password' }
  })
  t.equal(changed.statusCode, 200)
  await sendDue()
  t.equal(received(user.email).length, CAP, 'the welcome and two links')
  const kinds = await app.db.selectFrom('email_outbox').select(['kind', 'digest']).where('recipient', '=', user.email).orderBy('id').execute()
  t.same(kinds, [
    { kind: 'welcome', digest: false }, { kind: 'email_verification', digest: false }, { kind: 'email_verification', digest: false },
    { kind: 'password_changed', digest: true }
  ], 'the third link was never queued; the notice waits for its digest')
  await endTheHourOf(user.email)
  await sendDue()
  t.match(received(user.email).at(-1), { subject: /^A security notice for your account/, text: /Your password was changed/ })
})
