// Security round four, row 5: an attacker who keeps an account locked for new devices (ten wrong
// passwords a minute, window after window) cannot keep its owner out. The locked answer says
// ACCOUNT_LOCKED; the owner asks for a link by email (POST /auth/device-link), follows it on the
// new device (POST /auth/device-link/confirm: the device cookie), and signs in there with the
// password, the lock still holding for everyone else. Through a real SMTP server.
import t from 'tap'
import { build, failedLogin, json, randomAddress as ip, uniqueEmail } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, AUTH_RATE_LIMIT_MAX: '3', EMAIL_LINK_MAX_PER_HOUR: '3' })

const LINK_INVALID = { success: false, error: 'This sign-in link is invalid or has expired', code: 'DEVICE_LINK_INVALID' }
const signIn = (email: string, password: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/auth/login', remoteAddress: ip(), headers, payload: { email, password } })
const askForLink = (email: string) => app.inject({ method: 'POST', url: '/auth/device-link', remoteAddress: ip(), payload: { email } })
const follow = (token: string) => app.inject({ method: 'POST', url: '/auth/device-link/confirm', remoteAddress: ip(), payload: { token } })
const cookieOf = (res: { cookies: Array<{ name: string, value: string }> }) => {
  const device = res.cookies.find((cookie) => cookie.name === 'sign_in_device')
  return device === undefined ? undefined : { cookie: `sign_in_device=${device.value}` }
}
/** Signed up from an address of its own (sign-ups count against the client's attempts). */
async function signUp (email = uniqueEmail()) {
  const password = 'the owner knows this'
  const res = await app.inject({ method: 'POST', url: '/auth/register', remoteAddress: ip(), payload: { email, password } })
  if (res.statusCode !== 201) throw new Error(`register: ${res.statusCode} ${res.body}`)
  return { id: json(res).user.id as string, email, password }
}
/** The attacker's wrong passwords from fresh addresses, until the account is locked. */
async function lock (email: string): Promise<void> {
  for (let i = 0; i < 3; i++) await failedLogin(app, email, ip())
}

t.test('the owner of a locked account gets in from a new device through the emailed link; the lock holds for everyone else', async (t) => {
  const owner = await signUp(uniqueEmail('owner'))
  await lock(owner.email)
  const locked = await signIn(owner.email, owner.password)
  t.equal(locked.statusCode, 429, 'the right password from a new device waits')
  t.equal(json(locked).code, 'ACCOUNT_LOCKED', 'and the answer says why, so the page can offer the link')
  t.match(locked.headers['retry-after'], /^\d+$/)

  const asked = await askForLink(owner.email.toUpperCase())
  t.equal(asked.statusCode, 202)
  t.same(json(asked), { success: true, data: null })
  const mail = await sink.waitFor((m) => m.to === owner.email && /^Sign in from this device/.test(m.subject))
  t.match(mail.link, /^http:\/\/localhost:3000\/trust-device\?token=[\w-]{43}$/, 'a link to the web client with a 256-bit token')
  t.match(mail.text, /valid for 1 hour and works once/)

  const followed = await follow(mail.token!)
  t.equal(followed.statusCode, 200)
  t.same(json(followed), { success: true, data: null })
  t.notOk(followed.cookies.some((cookie) => cookie.name === 'auth_token'), 'the link signs nothing in by itself')
  const device = cookieOf(followed)
  if (device === undefined) throw new Error('no device cookie')
  t.match(followed.cookies.find((cookie) => cookie.name === 'sign_in_device'), { httpOnly: true, sameSite: 'Lax', path: '/' })

  t.equal((await signIn(owner.email, 'a wrong password', device)).statusCode, 401, 'this device is past the lock: a typo is a plain 401')
  const inside = await signIn(owner.email, owner.password, device)
  t.equal(inside.statusCode, 200, 'and the password signs the owner in')
  t.equal(json(inside).user.id, owner.id)

  await lock(owner.email)
  t.equal(json(await signIn(owner.email, owner.password)).code, 'ACCOUNT_LOCKED', 'the attacker, and any other new device, stay locked out')
  t.equal((await signIn(owner.email, owner.password, device)).statusCode, 200, 'while the owner\'s device keeps its way in')

  t.same(json(await follow(mail.token!)), LINK_INVALID, 'the link works once')
  const events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: { authorization: `Bearer ${json(inside).token}` } })).data
  t.ok(events.some((e: { type: string }) => e.type === 'device-trusted'), 'the feed records the trusted device')
})

t.test('the link\'s device cookie is for its own account only', async (t) => {
  const [owner, other] = [await signUp(), await signUp()]
  await lock(owner.email)
  await lock(other.email)
  await askForLink(owner.email)
  const mail = await sink.waitFor((m) => m.to === owner.email && /^Sign in from this device/.test(m.subject))
  const device = cookieOf(await follow(mail.token!))!
  t.equal(json(await signIn(other.email, other.password, device)).code, 'ACCOUNT_LOCKED', 'another locked account is not opened by it')
  t.equal((await signIn(owner.email, owner.password, device)).statusCode, 200)
})

t.test('the request answers the same for an unknown address and queues nothing; a forged token is refused', async (t) => {
  const nobody = `nobody-${Date.now()}@example.com`
  const owner = await signUp()
  const [unknown, known] = [await askForLink(nobody), await askForLink(owner.email)]
  t.equal(unknown.statusCode, 202)
  t.equal(unknown.body, known.body, 'byte for byte')
  await app.mail.sender.backgroundDone()
  t.same(await app.db.selectFrom('email_outbox').select('id').where('recipient', '=', nobody).execute(), [])
  t.same(json(await follow('x'.repeat(43))), LINK_INVALID)
  const wrongPurpose = await app.inject({ method: 'POST', url: '/auth/email/verify', payload: { token: (await sink.waitFor((m) => m.to === owner.email && /^Sign in from/.test(m.subject))).token! } })
  t.equal(json(wrongPurpose).code, 'VERIFICATION_TOKEN_INVALID', 'a device link is no verification link')
})

t.test('device links count against the inbox\'s mails of the hour', async (t) => {
  const owner = await signUp()
  // The welcome, then two links: the hour's three.
  for (let i = 0; i < 4; i++) t.equal((await askForLink(owner.email)).statusCode, 202)
  await app.mail.sender.backgroundDone()
  const links = await app.db.selectFrom('email_outbox').select('id').where('recipient', '=', owner.email).where('kind', '=', 'device_link').execute()
  t.equal(links.length, 2, 'past the cap the same 202, and nothing queued')
})
