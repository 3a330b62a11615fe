// Security round four, row 1: no way in outlives its owner's reset. The attack, told whole against
// a real OpenID Connect provider (oidc-provider), a real SMTP server and the app: an attacker
// verifies their own address, links their own provider identity, then moves the account to the
// victim's address; the victim, refused at sign-up, resets the password. Before the fix the
// attacker's identity stayed linked and signed in to the victim's account. Now the move waits for
// the victim's inbox to confirm it, a confirmation or reset of an address the account did not
// hold when an identity was linked removes that identity, and the mails name what stays linked.
import t from 'tap'
import { build, json, registerUser, uniqueEmail, type TestUser } from '../support/helper.js'
import { startOidcProvider } from '../support/oidc-provider.js'
import { providerFlow } from '../support/provider-flow.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const API = 'http://localhost:3002'
const client = { clientId: 'task-app', clientSecret: 'a-client-secret-for-the-tests', redirectUris: [`${API}/auth/providers/test/callback`] }
const attackers = [uniqueEmail('attacker-a'), uniqueEmail('attacker-b'), uniqueEmail('attacker-c')] as const
const ownerEmail = uniqueEmail('owner')
const idp = await startOidcProvider(t, {
  clients: [client],
  accounts: [
    ...attackers.map((email, i) => ({ subject: `attacker-${i}`, email, emailVerified: true })),
    { subject: 'owner-own', email: ownerEmail, emailVerified: true }
  ]
})
const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, {
  SMTP_URL: sink.url,
  API_URL: API,
  APP_URL: 'http://localhost:3000',
  OIDC_PROVIDERS: 'test',
  OIDC_TEST_ISSUER: idp.issuer,
  OIDC_TEST_CLIENT_ID: client.clientId,
  OIDC_TEST_CLIENT_SECRET: client.clientSecret,
  OIDC_TEST_NAME: 'Test IdP'
})
const flow = providerFlow(app, idp, 'test')
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const post = (url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) => app.inject({ method: 'POST', url, headers, payload })
const mailTo = (email: string, subject: RegExp) => sink.waitFor((m) => m.to === email && subject.test(m.subject))
const identitiesOf = async (auth: Record<string, string>) => json(await app.inject({ method: 'GET', url: '/account/identities', headers: auth })).data as unknown[]
const tasksOf = async (token: string) => json(await app.inject({ method: 'GET', url: '/tasks', headers: bearer(token) })).data as Array<{ title: string }>

/** Registered, verified through the welcome link, and `subject`'s identity linked: the attacker's own account, as it starts. */
async function attackerWithIdentity (email: string, subject: string): Promise<TestUser> {
  const attacker = await registerUser(app, { email, password: 'the attacker knows this' })
  const welcome = await mailTo(email, /^Welcome/)
  if ((await post('/auth/email/verify', { token: welcome.token! })).statusCode !== 200) throw new Error('verify')
  const linked = await flow.link(attacker.auth, subject)
  if (linked.searchParams.get('linked') !== 'test') throw new Error(`link: ${linked.href}`)
  return attacker
}

/** The victim's "forgot password", then the reset through the mailed link: the reset mail, and the answer. */
async function resetByMail (email: string, password: string) {
  t.equal((await post('/auth/password/forgot', { email })).statusCode, 202)
  const mail = await mailTo(email, /^Reset your password/)
  return { mail, reset: await post('/auth/password/reset', { token: mail.token!, password }) }
}

t.test('the reported attack: the move waits for the victim\'s inbox, so the victim signs up and the identity opens only the attacker\'s account', async (t) => {
  const attacker = await attackerWithIdentity(attackers[0], 'attacker-0')
  const victimEmail = uniqueEmail('victim-a')
  const moved = await app.inject({ method: 'PATCH', url: '/account/profile', headers: attacker.auth, payload: { email: victimEmail, currentPassword: attacker.password } })
  t.equal(moved.statusCode, 200)
  t.match(json(moved).data, { email: attackers[0], pendingEmail: victimEmail }, 'not applied: it waits for the victim\'s address to confirm it')

  const signUp = await post('/auth/register', { email: victimEmail, password: 'the victim chose this' })
  t.equal(signUp.statusCode, 201, 'the victim\'s address is still free: sign-up works')
  const victim = json(signUp)
  await app.inject({ method: 'POST', url: '/tasks', headers: bearer(victim.token), payload: { title: 'the victim\'s secret plans' } })

  const viaIdentity = await flow.signIn('attacker-0')
  if (!('token' in viaIdentity)) throw new Error(`provider sign-in: ${viaIdentity.error}`)
  t.equal(viaIdentity.user.id, attacker.id, 'the attacker\'s identity signs in to the attacker\'s own account')
  t.not(viaIdentity.user.id, victim.user.id)
  t.same(await tasksOf(viaIdentity.token), [], 'and sees none of the victim\'s tasks')

  const link = await sink.waitFor((m) => m.to === victimEmail && /^Verify your email/.test(m.subject))
  const late = await post('/auth/email/verify', { token: link.token! })
  t.equal(late.statusCode, 409, 'the victim following the attacker\'s link later moves nothing: the address has its owner')
  t.equal(json(late).code, 'EMAIL_TAKEN')
})

t.test('the victim confirms the attacker\'s link: the address moves, the identity linked under another address goes, and the reset is the victim\'s', async (t) => {
  const attacker = await attackerWithIdentity(attackers[1], 'attacker-1')
  const victimEmail = uniqueEmail('victim-b')
  await app.inject({ method: 'PATCH', url: '/account/profile', headers: attacker.auth, payload: { email: victimEmail, currentPassword: attacker.password } })
  // A "Verify your email" mail the victim follows without a second thought.
  const link = await sink.waitFor((m) => m.to === victimEmail && /^Verify your email/.test(m.subject))
  const confirmed = await post('/auth/email/verify', { token: link.token! })
  t.equal(confirmed.statusCode, 200)
  t.equal(json(confirmed).data.email, victimEmail)
  t.same(await identitiesOf(attacker.auth), [], 'the identity linked while the account held the attacker\'s address is gone')
  const notice = await mailTo(attackers[1], /^Your email address was changed/)
  t.match(notice.text, /Sign-in with Test IdP was removed from the account with the change/, 'the old address is told, naming it')
  const events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: attacker.auth })).data
  t.match(events.find((e: { type: string }) => e.type === 'identity-unlinked'), { method: 'email-changed', provider: 'test' })

  t.equal((await post('/auth/register', { email: victimEmail, password: 'the victim chose this' })).statusCode, 409, 'the victim\'s sign-up: the address has an account')
  const { mail, reset } = await resetByMail(victimEmail, 'the victim owns this now')
  t.notMatch(mail.text, /Test IdP/, 'the reset mail names no provider: none stays linked')
  t.equal(reset.statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: attacker.auth })).statusCode, 401, 'the attacker\'s session ended with the reset')

  const viaIdentity = await flow.signIn('attacker-1')
  if (!('token' in viaIdentity)) throw new Error(`provider sign-in: ${viaIdentity.error}`)
  t.not(viaIdentity.user.id, attacker.id, 'the identity no longer opens the account the victim now holds')
  t.equal(viaIdentity.user.email, attackers[1], 'it makes a new account for its own verified address')
})

t.test('an account moved before this fix (unconfirmed, identity linked under the old address): the victim\'s reset removes the identity', async (t) => {
  const attacker = await attackerWithIdentity(attackers[2], 'attacker-2')
  const victimEmail = uniqueEmail('victim-c')
  // As the old code did: the address applied at once, unverified.
  await app.db.updateTable('users').set({ email: victimEmail, email_verified: null, email_changed_at: new Date() }).where('id', '=', attacker.id).execute()
  const victimTask = await app.inject({ method: 'POST', url: '/tasks', headers: attacker.auth, payload: { title: 'kept by the account' } })
  t.equal(victimTask.statusCode, 201)

  const { mail, reset } = await resetByMail(victimEmail, 'the victim owns this now')
  t.notMatch(mail.text, /Test IdP/, 'the reset keeps no identity, so its mail names none')
  t.equal(reset.statusCode, 200)
  const owner = json(reset)
  t.same(await identitiesOf(bearer(owner.token)), [], 'the attacker\'s identity is gone')
  const changed = await mailTo(victimEmail, /^Your password was changed/)
  t.notMatch(changed.text, /Test IdP/)

  const viaIdentity = await flow.signIn('attacker-2')
  if (!('token' in viaIdentity)) throw new Error(`provider sign-in: ${viaIdentity.error}`)
  t.not(viaIdentity.user.id, owner.user.id, 'the attacker is refused the victim\'s account')
  t.same(await tasksOf(viaIdentity.token), [], 'and reaches none of its tasks')
})

t.test('an owner\'s own identity outlives their reset, and the reset and "password changed" mails name it', async (t) => {
  const owner = await registerUser(app, { email: ownerEmail })
  const welcome = await mailTo(ownerEmail, /^Welcome/)
  t.equal((await post('/auth/email/verify', { token: welcome.token! })).statusCode, 200)
  t.equal((await flow.link(owner.auth, 'owner-own')).searchParams.get('linked'), 'test')

  const { mail, reset } = await resetByMail(ownerEmail, 'a new password of mine')
  t.match(mail.text, /After the reset, sign-in with Test IdP still opens this account/, 'the reset mail names the provider that stays')
  t.equal(reset.statusCode, 200)
  const changed = await mailTo(ownerEmail, /^Your password was changed/)
  t.match(changed.text, /Besides the password, sign-in with Test IdP still opens this account/)
  t.equal((await identitiesOf(bearer(json(reset).token))).length, 1, 'linked under the address it still holds: kept')
  const viaIdentity = await flow.signIn('owner-own')
  t.ok('token' in viaIdentity && viaIdentity.user.id === owner.id, 'and it still signs the owner in')
})
