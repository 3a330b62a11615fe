// An email change waits for the new address to confirm it (decisions.md, Account; docs/security.md):
// the current address keeps signing in and is told, the link sent to the new one applies the
// change, and every link that no longer matches what the account holds or waits for is dead.
// End to end through a real SMTP server: each test follows the links in what arrived.
import t from 'tap'
import { build, json, registerUser, uniqueEmail, type TestUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_FROM: 'Task App <no-reply@example.com>' })

const post = (url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) => app.inject({ method: 'POST', url, headers, payload })
const login = (email: string, password: string) => post('/auth/login', { email, password })
const changeEmail = (user: TestUser, email: string) =>
  app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { email, currentPassword: user.password } })
const profile = async (user: TestUser) => json(await app.inject({ method: 'GET', url: '/account/profile', headers: user.auth })).data
/** The token of the latest "Verify your email" link sent to `email`, once it has arrived (not one of `seen`). */
const linkTo = async (email: string, seen: string[] = []) =>
  (await sink.waitFor((m) => m.to === email && /^Verify your email|^Welcome/.test(m.subject) && m.token !== undefined && !seen.includes(m.token))).token!
const verify = (token: string) => post('/auth/email/verify', { token })
const VERIFY_INVALID = { success: false, error: 'This verification link is invalid or has expired', code: 'VERIFICATION_TOKEN_INVALID' }
const RESET_INVALID = { success: false, error: 'This password reset link is invalid or has expired', code: 'RESET_TOKEN_INVALID' }

async function verifiedUser (): Promise<TestUser> {
  const user = await registerUser(app)
  const res = await verify(await linkTo(user.email))
  if (res.statusCode !== 200) throw new Error(`verify: ${res.statusCode} ${res.body}`)
  return user
}

t.test('a new email waits for its own confirmation; the current address keeps signing in, is told, then is told again', async (t) => {
  const user = await verifiedUser()
  const newEmail = uniqueEmail('moved')
  const changed = await changeEmail(user, newEmail.toUpperCase())
  t.equal(changed.statusCode, 200)
  t.match(json(changed).data, { email: user.email, emailVerified: ISO, pendingEmail: newEmail }, 'the account keeps its verified address; the new one waits')

  const told = await sink.waitFor((m) => m.to === user.email && /^A change of your email address was requested/.test(m.subject))
  t.match(told.text, newEmail, 'the current address is told which address was asked for')
  t.match(told.text, /reset your password now/)
  t.equal(told.token, undefined, 'and is sent no link')
  const link = await linkTo(newEmail)
  t.equal((await login(user.email, user.password)).statusCode, 200, 'until it is confirmed, the current address signs in')
  t.equal((await login(newEmail, user.password)).statusCode, 401, 'and the new one does not')
  t.equal((await profile(user)).pendingEmail, newEmail)

  const confirmed = await verify(link)
  t.equal(confirmed.statusCode, 200)
  t.match(json(confirmed).data, { email: newEmail, emailVerified: ISO })
  const notice = await sink.waitFor((m) => m.to === user.email && /^Your email address was changed/.test(m.subject))
  t.match(notice.text, newEmail, 'the old address learns the change happened')
  t.equal((await login(newEmail, user.password)).statusCode, 200, 'the new address signs in')
  t.equal((await login(user.email, user.password)).statusCode, 401, 'the old one no longer')
  t.match(await profile(user), { email: newEmail, pendingEmail: null })
  t.same(json(await verify(link)), VERIFY_INVALID, 'the link works once')

  const events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: user.auth })).data.map((e: { type: string }) => e.type)
  t.same(events.filter((type: string) => type.startsWith('email-')), ['email-changed', 'email-change-requested'], 'the feed has the request and its confirmation')
})

t.test('a later change replaces the waiting one: after B, C, then B again, only the last link to B works', async (t) => {
  const user = await verifiedUser()
  const [b, c] = [uniqueEmail('bee'), uniqueEmail('cee')]
  t.equal((await changeEmail(user, b)).statusCode, 200)
  const firstToB = await linkTo(b)
  t.equal((await changeEmail(user, c)).statusCode, 200)
  const toC = await linkTo(c)
  t.equal((await changeEmail(user, b)).statusCode, 200)
  const secondToB = await linkTo(b, [firstToB])
  t.same(json(await verify(firstToB)), VERIFY_INVALID, 'the link of the first request for B stays dead')
  t.same(json(await verify(toC)), VERIFY_INVALID, 'and so does C\'s, replaced')
  t.match(await profile(user), { email: user.email, pendingEmail: b }, 'nothing applied by them')
  const confirmed = await verify(secondToB)
  t.equal(confirmed.statusCode, 200)
  t.equal(json(confirmed).data.email, b)
})

t.test('asking for the current address again drops the waiting change, and its link dies', async (t) => {
  const user = await verifiedUser()
  const elsewhere = uniqueEmail('elsewhere')
  t.equal((await changeEmail(user, elsewhere)).statusCode, 200)
  const link = await linkTo(elsewhere)
  const back = await app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { email: user.email } })
  t.equal(back.statusCode, 200, 'no password needed to keep one\'s own address')
  t.match(json(back).data, { email: user.email, pendingEmail: null })
  t.same(json(await verify(link)), VERIFY_INVALID)
  t.equal((await profile(user)).email, user.email)
})

t.test('a password reset from the current address cancels a waiting change (whoever asked may be why)', async (t) => {
  const user = await verifiedUser()
  const thief = uniqueEmail('thief')
  t.equal((await changeEmail(user, thief)).statusCode, 200)
  const link = await linkTo(thief)
  t.equal((await post('/auth/password/forgot', { email: user.email })).statusCode, 202)
  const reset = await sink.waitFor((m) => m.to === user.email && /^Reset your password/.test(m.subject))
  t.equal((await post('/auth/password/reset', { token: reset.token!, password: 'the owner took it back' })).statusCode, 200, 'the reset link of the address that signs in works')
  t.same(json(await verify(link)), VERIFY_INVALID, 'the change\'s link is dead')
  const row = await app.db.selectFrom('users').select('email').where('id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(row.email, user.email)
  t.equal((await login(thief, 'the owner took it back')).statusCode, 401)
})

t.test('an address another account took meanwhile: its confirmation is 409 EMAIL_TAKEN, and the change is dropped', async (t) => {
  const user = await verifiedUser()
  const contested = uniqueEmail('contested')
  t.equal((await changeEmail(user, contested)).statusCode, 200)
  const link = await linkTo(contested)
  const other = await registerUser(app, { email: contested })
  const res = await verify(link)
  t.equal(res.statusCode, 409)
  t.same(json(res), { success: false, error: 'Email already registered', code: 'EMAIL_TAKEN' })
  t.match(await profile(user), { email: user.email, pendingEmail: null })
  t.equal((await login(contested, other.password)).statusCode, 200, 'the other account keeps it')
  t.same(json(await verify(link)), VERIFY_INVALID, 'the link is spent')
  t.equal((await changeEmail(user, contested)).statusCode, 409, 'and asking for it now is refused at once')
})

t.test('confirming the current address while a change waits leaves the change\'s link alive', async (t) => {
  const user = await registerUser(app)
  const welcome = await linkTo(user.email)
  const next = uniqueEmail('next')
  t.equal((await changeEmail(user, next)).statusCode, 200)
  const link = await linkTo(next)
  const verified = await verify(welcome)
  t.equal(verified.statusCode, 200)
  t.match(json(verified).data, { email: user.email, emailVerified: ISO })
  const confirmed = await verify(link)
  t.equal(confirmed.statusCode, 200, 'the waiting change is still confirmed by its own link')
  t.equal(json(confirmed).data.email, next)
})

t.test('after changes A → B → A, each confirmed, the links sent to A before them stay dead', async (t) => {
  const user = await verifiedUser()
  t.equal((await post('/auth/password/forgot', { email: user.email })).statusCode, 202)
  const reset = (await sink.waitFor((m) => m.to === user.email && /^Reset your password/.test(m.subject))).token!
  const b = uniqueEmail('bee')
  await changeEmail(user, b)
  t.equal((await verify(await linkTo(b))).statusCode, 200)
  t.same(json(await post('/auth/password/reset', { token: reset, password: 'taken over password' })), RESET_INVALID, 'a reset link for an address the account left')
  await changeEmail(user, user.email)
  const backLink = await linkTo(user.email, [...sink.received.filter((m) => m.to === user.email && m.token !== undefined).map((m) => m.token!)])
  t.equal((await verify(backLink)).statusCode, 200)
  t.equal((await profile(user)).email, user.email, 'back on A')
  t.same(json(await post('/auth/password/reset', { token: reset, password: 'taken over password' })), RESET_INVALID, 'the reset link sent to A the first time stays dead')
  t.equal((await login(user.email, user.password)).statusCode, 200, 'the password is unchanged')
})
