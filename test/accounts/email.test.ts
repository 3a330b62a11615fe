// Password reset, email verification and account notices, end to end: the app delivers
// through a real SMTP server (test/support/smtp-sink.ts), and each test follows the link in what
// arrived. Also: enumeration, every kind of bad token, and the outbox's retries.
import { createHash, randomBytes } from 'node:crypto'
import { sql } from 'kysely'
import t from 'tap'
import { build, json, registerUser, testConfig, uniqueEmail, until } from '../support/helper.js'
import { startSmtpSink, type ReceivedMail } from '../support/smtp-sink.js'

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const APP_URL = 'http://localhost:3000'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_FROM: 'Task App <no-reply@example.com>' })

const post = (url: string, payload?: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url, headers, ...(payload !== undefined && { payload }) })
const me = (token: string) => app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${token}` } })
const login = (email: string, password: string) => post('/auth/login', { email, password })
const mailTo = (email: string, subject: RegExp) => sink.waitFor((m) => m.to === email && subject.test(m.subject))
const userRow = (id: string) => app.db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirstOrThrow()
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')
const RESET_INVALID = { success: false, error: 'This password reset link is invalid or has expired', code: 'RESET_TOKEN_INVALID' }
const VERIFY_INVALID = { success: false, error: 'This verification link is invalid or has expired', code: 'VERIFICATION_TOKEN_INVALID' }

async function forgot (email: string): Promise<ReceivedMail> {
  const res = await post('/auth/password/forgot', { email })
  if (res.statusCode !== 202) throw new Error(`forgot: ${res.statusCode} ${res.body}`)
  return mailTo(email, /^Reset your password/)
}

t.test('forgot → the email arrives → its token resets the password and signs in; older sessions end', async (t) => {
  const user = await registerUser(app)
  const answer = await post('/auth/password/forgot', { email: `  ${user.email.toUpperCase()} ` })
  t.equal(answer.statusCode, 202)
  t.same(json(answer), { success: true, data: null })

  const mail = await mailTo(user.email, /^Reset your password/)
  t.equal(mail.subject, 'Reset your password - Task App')
  t.same(mail.parsed.from?.value, [{ name: 'Task App', address: 'no-reply@example.com' }], 'from EMAIL_FROM')
  t.match(mail.link, new RegExp(`^${APP_URL}/reset-password\\?token=[\\w-]{43}$`), 'a link to the web client with a 256-bit token')
  t.match(mail.text, /valid for 1 hour/)
  t.ok(mail.html.includes(`href="${mail.link}"`), 'the HTML part carries the same link')
  t.notMatch(mail.html, /<img|<script|https?:\/\/(?!localhost:3000)/, 'no images, scripts or links elsewhere')
  const token = mail.token!

  const stored = await app.db.selectFrom('email_tokens').selectAll().where('user_id', '=', user.id).where('purpose', '=', 'password_reset').execute()
  t.equal(stored.length, 1)
  t.equal(stored[0]!.token_hash, sha256(token), 'only the SHA-256 of the token is stored')
  t.equal(stored[0]!.email, user.email)

  const reset = await post('/auth/password/reset', { token, password: 'a brand new password' })
  t.equal(reset.statusCode, 200)
  const body = json(reset)
  t.same(Object.keys(body).sort(), ['success', 'token', 'user'])
  t.equal(body.user.id, user.id)
  t.match(body.user.emailVerified, ISO, 'the address the link reached is verified')
  t.equal(reset.cookies.find((c) => c.name === 'auth_token')?.value, body.token, 'signed in with the cookie, like login')

  t.equal((await me(user.token)).statusCode, 401, 'the token from before the reset no longer works')
  t.equal((await me(body.token)).statusCode, 200, 'the new one does')
  t.equal((await login(user.email, user.password)).statusCode, 401, 'the old password is refused')
  t.equal((await login(user.email, 'a brand new password')).statusCode, 200, 'the new password signs in')

  const again = await post('/auth/password/reset', { token, password: 'yet another password' })
  t.equal(again.statusCode, 400)
  t.same(json(again), RESET_INVALID, 'the token works once')

  const notice = await mailTo(user.email, /^Your password was changed/)
  t.equal(notice.link, undefined, 'the notice carries no token')
  const outbox = await app.db.selectFrom('email_outbox').selectAll().where('user_id', '=', user.id).where('kind', '=', 'password_reset').executeTakeFirstOrThrow()
  t.match(outbox, { recipient: user.email, text_body: null, html_body: null, link_nonce: null, attempts: 1, last_error: null, sent_at: ISO })
})

t.test('registration sends a welcome with the verification link; verifying sets emailVerified', async (t) => {
  const user = await registerUser(app)
  const welcome = await mailTo(user.email, /^Welcome/)
  t.match(welcome.link, new RegExp(`^${APP_URL}/verify-email\\?token=[\\w-]{43}$`))
  t.match(welcome.text, /If you did not create this account, do not follow the link/, 'it tells someone who did not sign up not to confirm it')
  t.equal(json(await me(user.token)).data.emailVerified, null)

  const verified = await post('/auth/email/verify', { token: welcome.token! })
  t.equal(verified.statusCode, 200)
  t.match(json(verified), { success: true, data: { id: user.id, email: user.email, emailVerified: ISO } })
  t.equal(json(await me(user.token)).data.emailVerified, json(verified).data.emailVerified, 'stored')

  const reused = await post('/auth/email/verify', { token: welcome.token! })
  t.equal(reused.statusCode, 400)
  t.same(json(reused), VERIFY_INVALID)

  const resend = await post('/auth/email/verification', undefined, user.auth)
  t.equal(resend.statusCode, 409)
  t.same(json(resend), { success: false, error: 'Email already verified', code: 'EMAIL_ALREADY_VERIFIED' })
})

t.test('an unverified user asks for a fresh link; it verifies; the resend needs a token', async (t) => {
  const user = await registerUser(app)
  await mailTo(user.email, /^Welcome/)
  t.equal((await post('/auth/email/verification')).statusCode, 401)
  const resend = await post('/auth/email/verification', undefined, user.auth)
  t.equal(resend.statusCode, 202)
  t.same(json(resend), { success: true, data: null })
  const mail = await mailTo(user.email, /^Verify your email/)
  const verified = await post('/auth/email/verify', { token: mail.token! })
  t.equal(verified.statusCode, 200)
  t.match(json(verified).data.emailVerified, ISO)
})

// Email changes, which wait for the new address to confirm them: test/accounts/email-change.test.ts.

t.test('a password change sends a notice and voids reset links sent before it', async (t) => {
  const user = await registerUser(app)
  const pending = (await forgot(user.email)).token!
  const changed = await app.inject({
    method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'changed on purpose' }
  })
  t.equal(changed.statusCode, 200)
  await mailTo(user.email, /^Your password was changed/)
  t.same(json(await post('/auth/password/reset', { token: pending, password: 'a reset after all' })), RESET_INVALID)
  t.equal((await login(user.email, 'changed on purpose')).statusCode, 200)
})

t.test('forgot answers an unknown address byte for byte like a known one, and queues nothing', async (t) => {
  const user = await registerUser(app)
  const unknown = uniqueEmail('nobody')
  const known = await post('/auth/password/forgot', { email: user.email })
  const stranger = await post('/auth/password/forgot', { email: unknown })
  t.equal(known.statusCode, 202)
  t.equal(stranger.statusCode, 202)
  t.equal(stranger.rawPayload.toString('hex'), known.rawPayload.toString('hex'), 'the same bytes')
  const headerNames = (res: typeof known) => Object.keys(res.headers).filter((h) => !['date', 'x-request-id'].includes(h)).sort()
  t.same(headerNames(stranger), headerNames(known))
  t.same({ ...stranger.headers, date: '', 'x-request-id': '' }, { ...known.headers, date: '', 'x-request-id': '' }, 'the same headers')
  await mailTo(user.email, /^Reset your password/)
  const queued = await app.db.selectFrom('email_outbox').select('id').where('recipient', '=', unknown).execute()
  t.equal(queued.length, 0)
})

t.test('reused, expired, forged and other-purpose tokens: 400, and nothing changes', async (t) => {
  const user = await registerUser(app)
  const welcome = await mailTo(user.email, /^Welcome/)
  const resetToken = (await forgot(user.email)).token!
  const before = await userRow(user.id)

  const tries: Array<[string, string, Record<string, unknown>]> = [
    ['forged reset token', '/auth/password/reset', { token: randomBytes(32).toString('base64url'), password: 'forged password' }],
    ['mangled reset token', '/auth/password/reset', { token: `${resetToken}x`, password: 'forged password' }],
    ['a verification token used to reset', '/auth/password/reset', { token: welcome.token!, password: 'forged password' }],
    ['a reset token used to verify', '/auth/email/verify', { token: resetToken }],
    ['forged verification token', '/auth/email/verify', { token: 'not-a-token' }]
  ]
  for (const [what, url, payload] of tries) {
    const res = await post(url, payload)
    t.equal(res.statusCode, 400, what)
    t.same(json(res), url.includes('reset') ? RESET_INVALID : VERIFY_INVALID, what)
  }

  // Expired: both kinds, pushed into the past in the database.
  await app.db.updateTable('email_tokens').set({ expires_at: sql`now() - interval '1 second'` }).where('user_id', '=', user.id).execute()
  t.same(json(await post('/auth/password/reset', { token: resetToken, password: 'too late password' })), RESET_INVALID, 'expired reset token')
  t.same(json(await post('/auth/email/verify', { token: welcome.token! })), VERIFY_INVALID, 'expired verification token')

  const after = await userRow(user.id)
  t.same(after, before, 'the user row is untouched')
  t.equal((await me(user.token)).statusCode, 200, 'the session still works')
  t.equal((await login(user.email, user.password)).statusCode, 200, 'the password still works')
  const used = await app.db.selectFrom('email_tokens').select('used_at').where('user_id', '=', user.id).execute()
  t.same(used.map((row) => row.used_at), [null, null], 'no token was used up')
})

t.test('a queued message holds no usable link: the token is derived when it is sent', async (t) => {
  const down = await startSmtpSink()
  const port = down.port
  await down.close()
  const queueing = await build(t, { SMTP_URL: `smtp://127.0.0.1:${port}`, EMAIL_RETRY_BASE_MS: '100', EMAIL_POLL_INTERVAL_MS: '100' })
  const user = await registerUser(queueing)
  t.equal((await queueing.inject({ method: 'POST', url: '/auth/password/forgot', payload: { email: user.email } })).statusCode, 202)
  const rows = () => queueing.db.selectFrom('email_outbox').selectAll().where('user_id', '=', user.id).orderBy('id').execute()
  await until(async () => { const r = await rows(); return r.length === 2 && r.every((row) => row.last_error !== null) }, 'both messages tried and kept')
  const queued = await rows()
  t.same(queued.map((row) => [row.kind, row.sent_at, row.failed_at]), [['welcome', null, null], ['password_reset', null, null]], 'kept for the next attempt')
  t.notMatch(JSON.stringify(queued), /token=/, 'no link in any column')

  // Every stored value, and every token-shaped run within one, tried as a link's token.
  const stored = queued.flatMap((row) => Object.values(row)).filter((value): value is string => typeof value === 'string')
  const candidates = new Set(stored.flatMap((value) => [value, ...(value.match(/[\w-]{20,}/g) ?? [])]).filter((value) => value.length <= 512))
  t.ok(candidates.size > 0)
  for (const token of candidates) {
    t.equal((await queueing.inject({ method: 'POST', url: '/auth/password/reset', payload: { token, password: 'taken over password' } })).statusCode, 400, `reset with ${token}`)
    t.equal((await queueing.inject({ method: 'POST', url: '/auth/email/verify', payload: { token } })).statusCode, 400, `verify with ${token}`)
  }

  // The server is back: the messages go out with working links.
  const back = await startSmtpSink(port)
  t.teardown(() => back.close())
  const welcome = await back.waitFor((m) => m.to === user.email && /^Welcome/.test(m.subject))
  const reset = await back.waitFor((m) => m.to === user.email && /^Reset your password/.test(m.subject))
  t.match(reset.link, new RegExp(`^${APP_URL}/reset-password\\?token=[\\w-]{43}$`))
  t.equal((await queueing.inject({ method: 'POST', url: '/auth/email/verify', payload: { token: welcome.token! } })).statusCode, 200, 'the welcome link verifies')
  t.equal((await queueing.inject({ method: 'POST', url: '/auth/password/reset', payload: { token: reset.token!, password: 'a new password at last' } })).statusCode, 200, 'the reset link resets')
  await until(async () => (await rows()).every((row) => row.sent_at !== null), 'both rows marked sent')
  t.match(await rows(), [{ text_body: null, link_nonce: null }, { text_body: null, link_nonce: null }], 'blanked once sent')
})

t.test('a message queued before AUTH_JWT_SECRET changed is given up, not sent with a dead link', async (t) => {
  const down = await startSmtpSink()
  await down.close()
  const config = await testConfig(t, { SMTP_URL: `smtp://127.0.0.1:${down.port}`, EMAIL_RETRY_BASE_MS: '100', EMAIL_POLL_INTERVAL_MS: '100' })
  const before = await build(t, {}, config)
  const user = await registerUser(before)
  const row = (db: typeof before.db) => db.selectFrom('email_outbox').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow()
  await until(async () => (await row(before.db)).last_error !== null, 'the welcome tried once')
  await before.close()

  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const after = await build(t, {}, {
    ...config,
    auth: { ...config.auth, jwtSecret: 'a-rotated-secret-that-is-long-enough-9876543210' },
    email: { ...config.email, smtpUrl: sink.url }
  })
  await until(async () => (await row(after.db)).failed_at !== null, 'the welcome given up')
  t.match(await row(after.db), { sent_at: null, failed_at: ISO, last_error: /link no longer works/, link_nonce: null })
  const fresh = await registerUser(after)
  await sink.waitFor((m) => m.to === fresh.email)
  t.notOk(sink.received.some((m) => m.to === user.email), 'nothing sent to the first address')
})

t.test('the reset password follows the registration rules', async (t) => {
  const user = await registerUser(app)
  const token = (await forgot(user.email)).token!
  const short = await post('/auth/password/reset', { token, password: 'short' })
  t.equal(short.statusCode, 400)
  t.match(json(short), { code: 'VALIDATION_FAILED', details: ['Password must be at least 8 characters - password'] })
  const long = await post('/auth/password/reset', { token, password: 'é'.repeat(40) })
  t.match(json(long), { code: 'VALIDATION_FAILED', details: ['Password must be at most 72 bytes - password'] })
  t.equal((await post('/auth/password/reset', { token, password: 'long enough now' })).statusCode, 200, 'the token survived the refusals')
})

t.test('the recovery routes are rate-limited like sign-in', async (t) => {
  const limited = await build(t, { SMTP_URL: sink.url, AUTH_RATE_LIMIT_MAX: '2', EMAIL_LINK_MAX_PER_HOUR: '3' })
  const remoteAddress = '10.1.2.3'
  const statuses = []
  for (let i = 0; i < 3; i++) {
    statuses.push((await limited.inject({ method: 'POST', url: '/auth/password/forgot', remoteAddress, payload: { email: uniqueEmail() } })).statusCode)
  }
  t.same(statuses, [202, 202, 429], 'per client address')
  const resets = []
  for (let i = 0; i < 3; i++) {
    resets.push((await limited.inject({ method: 'POST', url: '/auth/password/reset', remoteAddress: '10.1.2.4', payload: { token: `guess-${i}`, password: 'guessing away' } })).statusCode)
  }
  t.same(resets, [400, 400, 429], 'token guesses too')
  const target = uniqueEmail('flooded')
  const fromMany = []
  for (let i = 0; i < 4; i++) {
    fromMany.push((await limited.inject({ method: 'POST', url: '/auth/password/forgot', remoteAddress: `10.9.9.${i + 1}`, payload: { email: target } })).statusCode)
  }
  t.same(fromMany, [202, 202, 202, 202], 'each new address gets its one request')
  const repeat = await limited.inject({ method: 'POST', url: '/auth/password/forgot', remoteAddress: '10.9.9.1', payload: { email: target } })
  t.equal(repeat.statusCode, 202, 'past the inbox\'s links for the hour, the same answer (test/accounts/rate-limits.test.ts counts what is sent)')
})

t.test('the SMTP server down, then back: the email is retried and delivered once', async (t) => {
  const down = await startSmtpSink()
  const port = down.port
  await down.close()
  const retrying = await build(t, { SMTP_URL: `smtp://127.0.0.1:${port}`, EMAIL_RETRY_BASE_MS: '100', EMAIL_POLL_INTERVAL_MS: '100' })
  const user = await registerUser(retrying)
  const row = () => retrying.db.selectFrom('email_outbox').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow()
  await until(async () => (await row()).last_error !== null, 'the first failed attempt')
  const failed = await row()
  t.match(failed, { sent_at: null, failed_at: null, last_error: /ECONNREFUSED|connect/i })
  t.ok(failed.link_nonce, 'the message is kept for the next attempt')

  const back = await startSmtpSink(port)
  t.teardown(() => back.close())
  const mail = await back.waitFor((m) => m.to === user.email)
  t.match(mail.subject, /^Welcome/)
  await until(async () => (await row()).sent_at !== null, 'the row marked sent')
  const sent = await row()
  t.ok(sent.attempts >= 2, `attempted ${sent.attempts} times`)
  t.match(sent, { last_error: null, text_body: null, html_body: null, link_nonce: null })
  // Another pass of the sender after delivery sends nothing more.
  await retrying.mail.sender.runOnce()
  t.equal(back.received.filter((m) => m.to === user.email).length, 1, 'delivered exactly once')
})

t.test('a message that cannot be delivered in EMAIL_GIVE_UP_MS is given up, with the failure recorded', async (t) => {
  const down = await startSmtpSink()
  await down.close()
  const givingUp = await build(t, { SMTP_URL: `smtp://127.0.0.1:${down.port}`, EMAIL_RETRY_BASE_MS: '100', EMAIL_POLL_INTERVAL_MS: '100', EMAIL_GIVE_UP_MS: '1000' })
  const user = await registerUser(givingUp)
  const row = () => givingUp.db.selectFrom('email_outbox').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow()
  await until(async () => (await row()).failed_at !== null, 'the message given up')
  const failed = await row()
  t.match(failed, { sent_at: null, failed_at: ISO, last_error: /ECONNREFUSED|connect/i, text_body: null, link_nonce: null })
  t.ok(failed.attempts >= 2, `attempted ${failed.attempts} times`)
})

t.test('a message older than EMAIL_GIVE_UP_MS when its turn comes is given up, not sent with expired links', async (t) => {
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const app = await build(t, { SMTP_URL: sink.url, EMAIL_POLL_INTERVAL_MS: '100', EMAIL_GIVE_UP_MS: '60000' })
  const stale = uniqueEmail('stale')
  // Queued two hours ago, while mail was not configured.
  await app.db.insertInto('email_outbox').values({ user_id: null, kind: 'welcome', recipient: stale, subject: 'Welcome', text_body: 'old', html_body: '<p>old</p>', created_at: sql`now() - interval '2 hours'` as never }).execute()
  const fresh = await registerUser(app)
  await sink.waitFor((m) => m.to === fresh.email)
  const row = () => app.db.selectFrom('email_outbox').selectAll().where('recipient', '=', stale).executeTakeFirstOrThrow()
  await until(async () => (await row()).failed_at !== null, 'the stale message given up', 5_000)
  t.match(await row(), { sent_at: null, failed_at: ISO, last_error: 'not sent within EMAIL_GIVE_UP_MS', text_body: null })
  t.notOk(sink.received.some((m) => m.to === stale), 'never sent')
})

t.test('a permanent refusal (SMTP 5xx) is given up at once, recorded, and other mail still flows', async (t) => {
  const refusing = await startSmtpSink(0, { rejectRecipients: /^gone-/ })
  t.teardown(() => refusing.close())
  const strict = await build(t, { SMTP_URL: refusing.url, EMAIL_RETRY_BASE_MS: '100', EMAIL_POLL_INTERVAL_MS: '100' })
  const gone = await registerUser(strict, { email: uniqueEmail('gone') })
  const fine = await registerUser(strict)
  await refusing.waitFor((m) => m.to === fine.email)
  const row = () => strict.db.selectFrom('email_outbox').selectAll().where('user_id', '=', gone.id).executeTakeFirstOrThrow()
  await until(async () => (await row()).failed_at !== null, 'the refused message given up')
  t.match(await row(), { attempts: 1, sent_at: null, failed_at: ISO, last_error: /550/, text_body: null })
  t.notOk(refusing.received.some((m) => m.to === gone.email))
})
