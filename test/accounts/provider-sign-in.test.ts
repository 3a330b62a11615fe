// Sign-in through an OpenID Connect provider, end to end over HTTP (docs/identity-providers.md):
// a real provider (oidc-provider, test/support/oidc-provider.ts), the real app, the browser's
// part played here: start → the provider's sign-in → callback → one-time code → exchange.
// Account matching without takeovers, linking and unlinking, and every way it fails.
import t, { type Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { build, buildKeepingLog, json, registerUser, sharedApp, uniqueEmail } from '../support/helper.js'
import { startOidcProvider, type IdTokenClaims } from '../support/oidc-provider.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { codeAt } from '../support/totp.js'

const APP = 'http://localhost:3000'
const API = 'http://localhost:3002'
const CALLBACK = `${API}/auth/providers/test/callback`
const client = { clientId: 'task-app', clientSecret: 'a-client-secret-for-the-tests', redirectUris: [CALLBACK] }

const existingEmail = uniqueEmail('existing')
const linkedEmail = uniqueEmail('linker')
const idp = await startOidcProvider(t, {
  clients: [client],
  accounts: [
    { subject: 'new-1', email: uniqueEmail('New.Person').toUpperCase(), emailVerified: true, name: 'New Person' },
    { subject: 'unverified-2', email: uniqueEmail('unverified'), emailVerified: false },
    { subject: 'existing-3', email: `  ${existingEmail.toUpperCase()} `, emailVerified: true },
    { subject: 'link-4', email: linkedEmail, emailVerified: true },
    { subject: 'tamper-5', email: uniqueEmail('tamper'), emailVerified: true },
    { subject: 'down-6', email: uniqueEmail('down'), emailVerified: true },
    { subject: 'solo-7', email: uniqueEmail('solo'), emailVerified: true },
    { subject: 'second-8', email: uniqueEmail('second'), emailVerified: true },
    { subject: 'noemail-9' },
    { subject: 'pair-10', email: uniqueEmail('pair'), emailVerified: true },
    { subject: 'pair-11', email: uniqueEmail('pair-other'), emailVerified: true },
    { subject: 'owner-12', email: uniqueEmail('owner'), emailVerified: true },
    { subject: 'two-step-13', email: uniqueEmail('two-step'), emailVerified: true }
  ]
})

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, {
  SMTP_URL: sink.url,
  API_URL: API,
  APP_URL: APP,
  CORS_ORIGINS: 'https://admin.example.com',
  OIDC_PROVIDERS: 'test',
  OIDC_TEST_ISSUER: idp.issuer,
  OIDC_TEST_CLIENT_ID: client.clientId,
  OIDC_TEST_CLIENT_SECRET: client.clientSecret,
  OIDC_TEST_NAME: 'Test IdP'
})

const location = (res: LightMyRequestResponse) => new URL(String(res.headers.location))
const pathOf = (url: URL) => `${url.pathname}${url.search}`
const count = async (table: 'users' | 'user_identities' | 'sessions' | 'oidc_flows' | 'sign_in_codes' | 'email_outbox') =>
  Number((await app.db.selectFrom(table).select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow()).n)

/** A browser as far as the API sees it: its cookie jar, kept from every answer, sent with every request. */
class Browser {
  readonly jar = new Map<string, string>()
  constructor (readonly agent = 'Test Browser/1.0', readonly at: { api: FastifyInstance, remoteAddress?: string } = { api: app }) {}

  async request (method: 'GET' | 'POST' | 'DELETE', url: string, options: { payload?: Record<string, unknown>, headers?: Record<string, string> } = {}): Promise<LightMyRequestResponse> {
    const res = await this.at.api.inject({
      method,
      url,
      headers: { 'user-agent': this.agent, ...options.headers },
      cookies: Object.fromEntries(this.jar),
      ...(this.at.remoteAddress !== undefined && { remoteAddress: this.at.remoteAddress }),
      ...(options.payload && { payload: options.payload })
    })
    for (const cookie of res.cookies) {
      if (cookie.maxAge === 0 || cookie.value === '' || (cookie.expires !== undefined && cookie.expires.getTime() <= Date.now())) this.jar.delete(cookie.name)
      else this.jar.set(cookie.name, cookie.value)
    }
    return res
  }

  /** The provider's binding cookies it holds. */
  get bindings (): string[] { return [...this.jar.keys()].filter((name) => name.startsWith('oidc_')) }
}

interface Started { res: LightMyRequestResponse, providerUrl: string, browser: Browser }

async function start (t: Test, returnTo = `${APP}/welcome`, browser = new Browser()): Promise<Started> {
  const res = await browser.request('GET', `/auth/providers/test/start?returnTo=${encodeURIComponent(returnTo)}`)
  t.equal(res.statusCode, 302, 'start redirects')
  return { res, providerUrl: String(res.headers.location), browser }
}

/** The callback as a browser delivers it: the provider's redirect, with its cookies. */
const callback = (url: URL, browser: Browser) => browser.request('GET', pathOf(url))

/** Start → the provider as `subject` → callback: where the browser lands. */
async function signInAt (t: Test, subject: string, returnTo?: string, browser = new Browser()): Promise<URL> {
  const started = await start(t, returnTo, browser)
  const back = await idp.signInAt(started.providerUrl, subject)
  const res = await callback(back, browser)
  t.equal(res.statusCode, 302, 'the callback redirects')
  return location(res)
}

const exchange = (code: string, browser: Browser) => browser.request('POST', '/auth/providers/exchange', { payload: { code } })

async function signedIn (t: Test, subject: string): Promise<{ token: string, user: Record<string, any> }> {
  const browser = new Browser()
  const landed = await signInAt(t, subject, undefined, browser)
  const code = landed.searchParams.get('signin')
  if (code === null) throw new Error(`not signed in: ${landed.href}`)
  const res = await exchange(code, browser)
  t.equal(res.statusCode, 200, 'the code is exchanged')
  return { token: json(res).token, user: json(res).user }
}

/** The owner confirms the address through the welcome mail's link (a link needs a verified address). */
async function verifyEmail (user: { email: string }): Promise<void> {
  const welcome = await sink.waitFor((mail) => mail.to === user.email && mail.token !== undefined)
  const res = await app.inject({ method: 'POST', url: '/auth/email/verify', payload: { token: welcome.token } })
  if (res.statusCode !== 200) throw new Error(`verify: ${res.statusCode} ${res.body}`)
}

/** POST /account/identities/test from `browser` signed in with `auth`, then the provider as `subject`: where it lands. */
async function link (t: Test, auth: Record<string, string>, subject: string, returnTo?: string, browser = new Browser()): Promise<URL> {
  const query = returnTo === undefined ? '' : `?returnTo=${encodeURIComponent(returnTo)}`
  const res = await browser.request('POST', `/account/identities/test${query}`, { headers: auth })
  t.equal(res.statusCode, 200, `link started: ${res.body}`)
  return location(await callback(await idp.signInAt(json(res).data.url, subject), browser))
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const outbox = async (userId: string) =>
  (await app.db.selectFrom('email_outbox').select(['kind', 'recipient']).where('user_id', '=', userId).orderBy('id').execute())

t.test('GET /auth/providers lists the configured providers', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/auth/providers' })
  t.same(json(res), { success: true, data: [{ id: 'test', name: 'Test IdP' }] })
})

t.test('start: a redirect to the provider with PKCE S256, state and nonce, bound to this browser', async (t) => {
  const { res, providerUrl } = await start(t)
  const url = new URL(providerUrl)
  t.equal(`${url.origin}${url.pathname}`, `${idp.issuer}/auth`)
  t.match(Object.fromEntries(url.searchParams), {
    response_type: 'code', client_id: client.clientId, redirect_uri: CALLBACK, code_challenge_method: 'S256', scope: 'openid email profile'
  })
  for (const name of ['state', 'nonce', 'code_challenge']) t.match(url.searchParams.get(name), /^[\w-]{43,}$/, name)
  const [cookie] = res.cookies
  t.match(cookie, { name: /^oidc_[0-9a-f]{16}$/, httpOnly: true, sameSite: 'Lax', path: '/', maxAge: 600 }, 'a cookie of its own binds the flow to this browser')
  const stored = await app.db.selectFrom('oidc_flows').selectAll().execute()
  t.notOk(stored.some((flow) => flow.state_hash === url.searchParams.get('state')), 'the state is stored only as its hash')
  t.notOk(stored.some((flow) => flow.browser_hash === cookie!.value), 'and so is the browser\'s cookie')
})

t.test('start refuses a returnTo off our origins and an unknown provider', async (t) => {
  for (const returnTo of ['https://evil.example/', 'http://localhost:3000@evil.example/', '//evil.example', 'javascript:alert(1)', 'http://localhost:3001/']) {
    const res = await app.inject({ method: 'GET', url: `/auth/providers/test/start?returnTo=${encodeURIComponent(returnTo)}` })
    t.equal(res.statusCode, 400, returnTo)
    t.equal(json(res).code, 'VALIDATION_FAILED')
    t.notOk(res.headers.location, 'no redirect')
  }
  t.equal((await start(t, 'https://admin.example.com/after')).res.statusCode, 302, 'an origin of CORS_ORIGINS is allowed')
  const unknown = await app.inject({ method: 'GET', url: '/auth/providers/nope/start' })
  t.equal(unknown.statusCode, 404)
  t.same(json(unknown), { success: false, error: 'No such identity provider', code: 'PROVIDER_NOT_FOUND' })
})

t.test('a new verified identity makes a new account without a password, signed in through a one-time code', async (t) => {
  const usersBefore = await count('users')
  const browser = new Browser()
  const landed = await signInAt(t, 'new-1', undefined, browser)
  t.equal(`${landed.origin}${landed.pathname}`, `${APP}/welcome`, 'back on returnTo')
  const code = landed.searchParams.get('signin')!
  t.match(code, /^[\w-]{43}$/)
  t.equal(await count('users'), usersBefore + 1, 'one account made')

  t.equal(browser.bindings.length, 1, 'the flow\'s cookie gave way to the code\'s')
  const res = await exchange(code, browser)
  t.equal(res.statusCode, 200)
  t.same(browser.bindings, [], 'the exchange clears the code\'s cookie')
  const body = json(res)
  t.same(Object.keys(body).sort(), ['success', 'token', 'user'], 'the answer of POST /auth/login')
  t.match(body.user, { name: 'New Person', email: /^new\.person-[0-9a-f]{8}@example\.com$/, emailVerified: /^\d{4}-/ })
  t.ok(res.cookies.find((c) => c.name === 'auth_token')?.httpOnly, 'and its cookie')
  const me = await app.inject({ method: 'GET', url: '/auth/me', headers: bearer(body.token) })
  t.equal(json(me).data.id, body.user.id)

  const row = await app.db.selectFrom('users').selectAll().where('id', '=', body.user.id).executeTakeFirstOrThrow()
  t.equal(row.password, null, 'no password')
  t.ok(await app.db.selectFrom('user_preferences').select('id').where('user_id', '=', row.id).executeTakeFirst(), 'preferences made as at registration')
  const identities = json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(body.token) })).data
  t.match(identities, [{ provider: 'test', email: body.user.email }])
  t.same((await outbox(row.id)).map((m) => m.kind), ['welcome_verified'], 'one email queued')
  const welcome = await sink.waitFor((mail) => mail.to === body.user.email)
  t.match(welcome, { subject: /^Welcome to /, text: /you signed up with Test IdP/, link: undefined, token: undefined }, 'a welcome without a verification link')

  const [session] = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(body.token) })).data
  t.match(session, { method: 'provider', provider: 'test', userAgent: 'Test Browser/1.0', current: true })
  const [event] = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: bearer(body.token) })).data
  t.match(event, { type: 'sign-in', method: 'provider', provider: 'test' })

  const again = await exchange(code, browser)
  t.equal(again.statusCode, 400, 'the code works once')
  t.same(json(again), { success: false, error: 'This sign-in code is invalid or has expired', code: 'SIGN_IN_CODE_INVALID' })

  await t.test('the returning user signs in to the same account', async (t) => {
    const usersNow = await count('users')
    const back = await signedIn(t, 'new-1')
    t.equal(back.user.id, body.user.id)
    t.equal(await count('users'), usersNow, 'no other account')
  })

  await t.test('password sign-in to it is the same 401 as a wrong password; a profile change asking a password says PASSWORD_NOT_SET', async (t) => {
    const login = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: body.user.email, password: 'any password at all' } })
    t.equal(login.statusCode, 401)
    t.same(json(login), { success: false, error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' })
    for (const payload of [{ currentPassword: 'whatever it is', newPassword: 'a new password' }, { email: uniqueEmail('moved') }]) {
      const res = await app.inject({ method: 'PATCH', url: '/account/profile', headers: bearer(body.token), payload })
      t.equal(res.statusCode, 400)
      t.equal(json(res).code, 'PASSWORD_NOT_SET')
    }
    // It sets one through the reset flow.
    const forgot = await app.inject({ method: 'POST', url: '/auth/password/forgot', payload: { email: body.user.email } })
    t.equal(forgot.statusCode, 202)
    const reset = await sink.waitFor((mail) => mail.to === body.user.email && mail.token !== undefined)
    const set = await app.inject({ method: 'POST', url: '/auth/password/reset', payload: { token: reset.token, password: 'now with a password' } })
    t.equal(set.statusCode, 200)
    const withPassword = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: body.user.email, password: 'now with a password' } })
    t.equal(withPassword.statusCode, 200, 'and signs in with it')
    t.equal(json(withPassword).user.id, body.user.id)
  })
})

t.test('an identity whose email (in any case) has an account is never linked silently: ACCOUNT_EXISTS, nothing stored', async (t) => {
  const owner = await registerUser(app, { email: existingEmail })
  const [users, identities] = [await count('users'), await count('user_identities')]
  const landed = await signInAt(t, 'existing-3')
  t.equal(landed.searchParams.get('error'), 'ACCOUNT_EXISTS')
  t.equal(landed.searchParams.get('signin'), null)
  t.equal(await count('users'), users)
  t.equal(await count('user_identities'), identities)
  const list = json(await app.inject({ method: 'GET', url: '/account/identities', headers: owner.auth })).data
  t.same(list, [], 'the owner\'s account has no identity')
})

t.test('an unverified provider email makes no account and matches none', async (t) => {
  const [users, identities] = [await count('users'), await count('user_identities')]
  t.equal((await signInAt(t, 'unverified-2')).searchParams.get('error'), 'EMAIL_NOT_VERIFIED')
  t.equal((await signInAt(t, 'noemail-9')).searchParams.get('error'), 'EMAIL_NOT_VERIFIED', 'nor does no email')
  t.equal(await count('users'), users)
  t.equal(await count('user_identities'), identities)
})

t.test('linking: the signed-in owner links the identity; it then signs them in; a notice is mailed', async (t) => {
  const owner = await registerUser(app, { email: linkedEmail })
  const unverified = await app.inject({ method: 'POST', url: '/account/identities/test', headers: owner.auth })
  t.equal(unverified.statusCode, 403, 'not before the address is confirmed: it may be someone else\'s')
  t.same(json(unverified), { success: false, error: 'Verify your email address first', code: 'EMAIL_NOT_VERIFIED' })
  await verifyEmail(owner)
  const landed = await link(t, owner.auth, 'link-4', `${APP}/settings`)
  t.equal(landed.href, `${APP}/settings?linked=test`)

  const identities = json(await app.inject({ method: 'GET', url: '/account/identities', headers: owner.auth })).data
  t.match(identities, [{ id: String, provider: 'test', email: linkedEmail, createdAt: /^\d{4}-/ }])
  const notice = await sink.waitFor((mail) => mail.to === linkedEmail && mail.subject.startsWith('A new way to sign in was added'))
  t.match(notice.text, /Sign-in with Test IdP was added to your .* account/)
  const events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: owner.auth })).data
  t.match(events[0], { type: 'identity-linked', provider: 'test' })

  const viaProvider = await signedIn(t, 'link-4')
  t.equal(viaProvider.user.id, owner.id, 'the identity signs the owner in')

  await t.test('the same identity cannot be linked to another account', async (t) => {
    const other = await registerUser(app)
    await verifyEmail(other)
    t.equal((await link(t, other.auth, 'link-4')).href, `${APP}/?error=IDENTITY_IN_USE`)
    t.same(json(await app.inject({ method: 'GET', url: '/account/identities', headers: other.auth })).data, [])
  })

  await t.test('unlinking: another user\'s identity is 404; the owner\'s goes, with a notice; it signs in no one then', async (t) => {
    const other = await registerUser(app)
    const id = identities[0].id
    const theirs = await app.inject({ method: 'DELETE', url: `/account/identities/${id}`, headers: other.auth })
    t.equal(theirs.statusCode, 404)
    t.equal(json(theirs).code, 'IDENTITY_NOT_FOUND')
    const res = await app.inject({ method: 'DELETE', url: `/account/identities/${id}`, headers: owner.auth })
    t.equal(res.statusCode, 200)
    t.same(json(await app.inject({ method: 'GET', url: '/account/identities', headers: owner.auth })).data, [])
    const notice = await sink.waitFor((mail) => mail.to === linkedEmail && mail.subject.startsWith('A way to sign in was removed'))
    t.match(notice.text, /Sign-in with Test IdP was removed from your .* account/)
    t.equal((await signInAt(t, 'link-4')).searchParams.get('error'), 'ACCOUNT_EXISTS', 'now an unknown identity whose email has an account')
  })
})

t.test('never the last way to sign in: an account without a password keeps its only identity', async (t) => {
  const solo = await signedIn(t, 'solo-7')
  const [identity] = json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(solo.token) })).data
  const res = await app.inject({ method: 'DELETE', url: `/account/identities/${identity.id}`, headers: bearer(solo.token) })
  t.equal(res.statusCode, 409)
  t.same(json(res), { success: false, error: 'This is the account\'s last way to sign in', code: 'LAST_SIGN_IN_METHOD' })
  t.equal(json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(solo.token) })).data.length, 1, 'still linked')

  // With a second identity linked, one of them may go.
  t.equal((await link(t, bearer(solo.token), 'second-8')).searchParams.get('linked'), 'test')
  t.equal((await app.inject({ method: 'DELETE', url: `/account/identities/${identity.id}`, headers: bearer(solo.token) })).statusCode, 200)
})

t.test('a callback that is not this browser\'s flow: INVALID_STATE, nothing stored', async (t) => {
  const users = await count('users')
  const started = await start(t)
  const back = await idp.signInAt(started.providerUrl, 'tamper-5')

  const forged = new URL(back)
  forged.searchParams.set('state', 'x'.repeat(43))
  t.equal(location(await callback(forged, started.browser)).href, `${APP}/?error=INVALID_STATE`, 'an unknown state: back to APP_URL')
  t.equal(location(await callback(back, new Browser())).href, `${APP}/welcome?error=INVALID_STATE`, 'another browser (a login CSRF, a flow sent to someone)')
  t.equal(location(await callback(back, started.browser)).href, `${APP}/?error=INVALID_STATE`, 'and the flow is used up by that attempt')
  t.equal(await count('users'), users)

  const replay = await start(t)
  const replayBack = await idp.signInAt(replay.providerUrl, 'tamper-5')
  const first = location(await callback(replayBack, replay.browser))
  t.ok(first.searchParams.get('signin'), 'the first callback signs in')
  t.equal(location(await callback(replayBack, replay.browser)).searchParams.get('error'), 'INVALID_STATE', 'a replayed callback (the same code) does not')

  const expired = await start(t)
  const expiredBack = await idp.signInAt(expired.providerUrl, 'tamper-5')
  await app.db.updateTable('oidc_flows').set({ expires_at: new Date(Date.now() - 1000) }).execute()
  t.equal(location(await callback(expiredBack, expired.browser)).href, `${APP}/?error=INVALID_STATE`, 'a flow past its 10 minutes')
})

t.test('a one-time code sent to another browser does not sign it in (login CSRF)', async (t) => {
  const attacker = new Browser('Attacker')
  const landed = await signInAt(t, 'tamper-5', undefined, attacker)
  const code = landed.searchParams.get('signin')!
  const victim = new Browser('Victim')
  const res = await exchange(code, victim)
  t.equal(res.statusCode, 400)
  t.equal(json(res).code, 'SIGN_IN_CODE_INVALID')
  t.notOk(res.cookies.some((c) => c.name === 'auth_token'), 'no auth cookie for the victim')
  t.equal((await exchange(code, attacker)).statusCode, 400, 'and the code is spent')
})

t.test('two flows in one browser keep their own cookies: both complete', async (t) => {
  const browser = new Browser()
  const first = await start(t, `${APP}/first`, browser)
  const second = await start(t, `${APP}/second`, browser)
  t.equal(browser.bindings.length, 2)
  const secondBack = location(await callback(await idp.signInAt(second.providerUrl, 'tamper-5'), browser))
  const firstBack = location(await callback(await idp.signInAt(first.providerUrl, 'tamper-5'), browser))
  t.equal(firstBack.pathname, '/first')
  t.equal(secondBack.pathname, '/second')
  for (const landed of [firstBack, secondBack]) t.equal((await exchange(landed.searchParams.get('signin')!, browser)).statusCode, 200)
})

t.test('a replayed provider code is refused by the provider: PROVIDER_REJECTED', async (t) => {
  const first = await start(t)
  const firstBack = await idp.signInAt(first.providerUrl, 'tamper-5')
  t.ok(location(await callback(firstBack, first.browser)).searchParams.get('signin'))
  // A second flow of the same browser, fed the first flow's code under its own state.
  const second = await start(t, undefined, first.browser)
  const secondBack = await idp.signInAt(second.providerUrl, 'tamper-5')
  const replayed = new URL(secondBack)
  replayed.searchParams.set('code', firstBack.searchParams.get('code')!)
  t.equal(location(await callback(replayed, second.browser)).searchParams.get('error'), 'PROVIDER_REJECTED')
})

t.test('an expired one-time code is refused', async (t) => {
  const browser = new Browser()
  const landed = await signInAt(t, 'tamper-5', undefined, browser)
  await app.db.updateTable('sign_in_codes').set({ expires_at: new Date(Date.now() - 1000) }).execute()
  const res = await exchange(landed.searchParams.get('signin')!, browser)
  t.equal(res.statusCode, 400)
  t.equal(json(res).code, 'SIGN_IN_CODE_INVALID')
  for (const code of ['not-a-code', 'x'.repeat(256)]) t.equal((await exchange(code, browser)).statusCode, 400, 'nor does a made-up one')
  t.equal((await exchange('x'.repeat(257), browser)).statusCode, 400, 'a code too long is refused by its schema')
})

t.test('a tampered ID token (wrong audience, wrong nonce, wrong key, expired): INVALID_ID_TOKEN, nothing stored', async (t) => {
  const cases: Array<[string, ((claims: IdTokenClaims) => IdTokenClaims) | null, { signWithForeignKey?: boolean }]> = [
    ['wrong audience', (claims) => ({ ...claims, aud: 'another-client' }), {}],
    ['wrong nonce', (claims) => ({ ...claims, nonce: 'not-the-flows-nonce' }), {}],
    ['wrong key', (claims) => claims, { signWithForeignKey: true }],
    ['expired', (claims) => ({ ...claims, exp: Math.floor(Date.now() / 1000) - 600, iat: Math.floor(Date.now() / 1000) - 1200 }), {}],
    ['another issuer', (claims) => ({ ...claims, iss: 'https://evil.example' }), {}]
  ]
  for (const [what, tamper, options] of cases) {
    const [users, identities, codes] = [await count('users'), await count('user_identities'), await count('sign_in_codes')]
    idp.tamperIdTokens(tamper, options)
    try {
      t.equal((await signInAt(t, 'tamper-5')).searchParams.get('error'), 'INVALID_ID_TOKEN', what)
    } finally {
      idp.tamperIdTokens(null)
    }
    t.same([await count('users'), await count('user_identities'), await count('sign_in_codes')], [users, identities, codes], `${what}: nothing stored`)
  }
})

t.test('the provider down: a clear error on the redirect, nothing stored', async (t) => {
  const [users, flows] = [await count('users'), await count('oidc_flows')]
  // Down between the start and the callback: the code cannot be exchanged.
  const started = await start(t)
  const back = await idp.signInAt(started.providerUrl, 'down-6')
  await idp.stop()
  t.teardown(() => idp.restart())
  t.equal(location(await callback(back, started.browser)).href, `${APP}/welcome?error=PROVIDER_UNAVAILABLE`)
  t.equal(await count('users'), users, 'no account')

  // Down at the start, with discovery to do: a provider that never came up for this app.
  const fresh = await build(t, {
    API_URL: API, APP_URL: APP, OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: idp.issuer, OIDC_TEST_CLIENT_ID: client.clientId, OIDC_TEST_CLIENT_SECRET: client.clientSecret
  })
  const res = await fresh.inject({ method: 'GET', url: `/auth/providers/test/start?returnTo=${encodeURIComponent(`${APP}/login`)}` })
  t.equal(res.statusCode, 302)
  t.equal(res.headers.location, `${APP}/login?error=PROVIDER_UNAVAILABLE`)
  t.same(res.cookies, [], 'no flow cookie')
  t.equal(await count('oidc_flows'), flows, 'no flow stored')

  const owner = await registerUser(fresh)
  // Set up as confirmed (this app mails nowhere): what is under test is the provider being down.
  await fresh.db.updateTable('users').set({ email_verified: new Date() }).where('id', '=', owner.id).execute()
  const linking = await fresh.inject({ method: 'POST', url: '/account/identities/test', headers: owner.auth })
  t.equal(linking.statusCode, 503, 'linking answers 503 while the provider is down')

  await idp.restart()
  t.ok((await signedIn(t, 'down-6')).token, 'back up: the sign-in works again')
})

t.test('identity routes need a signed-in user; a link to an unknown provider is 404', async (t) => {
  t.equal((await app.inject({ method: 'GET', url: '/account/identities' })).statusCode, 401)
  t.equal((await app.inject({ method: 'POST', url: '/account/identities/test' })).statusCode, 401)
  const user = await registerUser(app)
  t.equal((await app.inject({ method: 'POST', url: '/account/identities/nope', headers: user.auth })).statusCode, 404)
})

t.test('an app without providers lists none and has none to start', async (t) => {
  const bare = await sharedApp()
  t.same(json(await bare.inject({ method: 'GET', url: '/auth/providers' })), { success: true, data: [] })
  t.equal((await bare.inject({ method: 'GET', url: '/auth/providers/test/start' })).statusCode, 404)
})

t.test('the purge: flows never called back and codes never exchanged go once expired', async (t) => {
  await start(t) // a flow whose browser never comes back
  const landed = await signInAt(t, 'tamper-5')
  t.ok(landed.searchParams.get('signin'))
  await app.db.updateTable('oidc_flows').set({ expires_at: new Date(Date.now() - 1000) }).execute()
  await app.db.updateTable('sign_in_codes').set({ expires_at: new Date(Date.now() - 1000) }).execute()
  const fresh = await start(t)
  await app.jobs.runOnce('identity.purge')
  t.equal(await count('sign_in_codes'), 0)
  t.equal(await count('oidc_flows'), 1, 'only the flow still within its 10 minutes')
  const back = await idp.signInAt(fresh.providerUrl, 'tamper-5')
  t.ok(location(await callback(back, fresh.browser)).searchParams.get('signin'), 'and it still works')
})

t.test('a link needs a recent sign-in or step-up, and completes only while that session is live', async (t) => {
  const owner = await registerUser(app)
  await verifyEmail(owner)
  const jti = JSON.parse(Buffer.from(owner.token.split('.')[1]!, 'base64url').toString()).jti as string
  await app.db.updateTable('sessions').set({ authenticated_at: new Date(Date.now() - 11 * 60_000) }).where('id', '=', jti).execute()
  const stale = await app.inject({ method: 'POST', url: '/account/identities/test', headers: owner.auth })
  t.equal(stale.statusCode, 403, 'a session older than STEP_UP_MAX_AGE_S (a stolen token, say) cannot add a way in')
  t.match(json(stale), { code: 'STEP_UP_REQUIRED', stepUp: { methods: ['password'], maxAgeSeconds: 600 } })

  const fresh = json(await app.inject({ method: 'POST', url: '/auth/login', payload: { email: owner.email, password: owner.password } })).token as string
  const browser = new Browser()
  const res = await browser.request('POST', '/account/identities/test', { headers: bearer(fresh) })
  t.equal(res.statusCode, 200)
  const back = await idp.signInAt(json(res).data.url, 'solo-7')
  // Meanwhile the owner signs out that session everywhere (from the older one).
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout-others', headers: owner.auth })).statusCode, 200)
  t.equal(location(await callback(back, browser)).searchParams.get('error'), 'INVALID_STATE', 'the link in flight ended with its session')
  t.same(json(await app.inject({ method: 'GET', url: '/account/identities', headers: owner.auth })).data, [], 'nothing linked')
})

t.test('a one-time code not yet exchanged ends with "sign out everywhere else"', async (t) => {
  const signedInBefore = await signedIn(t, 'new-1')
  const browser = new Browser()
  const code = (await signInAt(t, 'new-1', undefined, browser)).searchParams.get('signin')!
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout-others', headers: bearer(signedInBefore.token) })).statusCode, 200)
  t.equal((await exchange(code, browser)).statusCode, 400)
})

t.test('an identity of a provider no longer configured is no way to sign in: it does not keep the last one', async (t) => {
  const user = await signedIn(t, 'down-6')
  const [identity] = json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(user.token) })).data
  // A provider this deployment used to have (removed from OIDC_PROVIDERS since).
  await app.db.insertInto('user_identities').values({ id: 'old-identity', user_id: user.user.id, provider: 'gone', issuer: 'https://gone.example', subject: 'x', email: null }).execute()
  const res = await app.inject({ method: 'DELETE', url: `/account/identities/${identity.id}`, headers: bearer(user.token) })
  t.equal(res.statusCode, 409)
  t.equal(json(res).code, 'LAST_SIGN_IN_METHOD')
  t.equal((await app.inject({ method: 'DELETE', url: '/account/identities/old-identity', headers: bearer(user.token) })).statusCode, 200, 'the stale one may go')
})

t.test('two removals at once cannot both pass: one of the last two identities stays', async (t) => {
  const user = await signedIn(t, 'pair-10')
  t.equal((await link(t, bearer(user.token), 'pair-11')).searchParams.get('linked'), 'test')
  const identities = json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(user.token) })).data as Array<{ id: string }>
  t.equal(identities.length, 2)
  const answers = await Promise.all(identities.map((identity) =>
    app.inject({ method: 'DELETE', url: `/account/identities/${identity.id}`, headers: bearer(user.token) })))
  t.same(answers.map((res) => res.statusCode).sort(), [200, 409])
  t.equal(json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(user.token) })).data.length, 1)
})

t.test('each start is a sign-in attempt of its client: past the limit a 429, before any flow is stored', async (t) => {
  const providerEnv = { OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: idp.issuer, OIDC_TEST_CLIENT_ID: client.clientId, OIDC_TEST_CLIENT_SECRET: client.clientSecret }
  const limited = await build(t, { API_URL: API, APP_URL: APP, AUTH_RATE_LIMIT_MAX: '3', ...providerEnv })
  const flows = async () => Number((await limited.db.selectFrom('oidc_flows').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow()).n)
  const startFrom = (address: string) => limited.inject({ method: 'GET', url: '/auth/providers/test/start', remoteAddress: address })
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await startFrom('198.51.100.77')).statusCode)
  t.same(statuses, [302, 302, 302, 429])
  t.equal(await flows(), 3, 'the refused start stored nothing')
  const refused = await startFrom('198.51.100.77')
  t.same(refused.cookies, [], 'and set no cookie')
  t.equal(json(refused).code, 'RATE_LIMITED')
  t.equal((await startFrom('198.51.100.78')).statusCode, 302, 'another client is not held back')
})

/** Answers the browser between the provider and the web client can be given: a redirect, with the headers of every answer. */
function assertRedirect (t: Test, res: LightMyRequestResponse, expected: string, what: string): void {
  t.equal(res.statusCode, 302, `${what}: a redirect`)
  t.equal(res.headers.location, expected, `${what}: to ${expected}`)
  t.equal(res.body, '', `${what}: no body`)
  t.match(res.headers, { 'x-request-id': /\S/, 'x-content-type-options': 'nosniff', 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' }, `${what}: the headers of every answer`)
}

/** Row counts a refused callback must leave as they were. */
const stored = async () => ({ users: await count('users'), identities: await count('user_identities'), codes: await count('sign_in_codes'), mails: await count('email_outbox') })

t.test('a provider-vouched email that is no address makes no account: EMAIL_INVALID on the redirect, nothing stored or mailed', async (t) => {
  const notAddresses: Array<[string, string]> = [
    ['empty', ''],
    ['a semicolon in the domain', 'w2@ex;ample.test'],
    ['CR LF and a header after it', `crlf-${Date.now()}@example.com\r\nBcc: someone@elsewhere.test`],
    ['two mailboxes', 'one@example.com, two@example.org'],
    ['300 characters', `${'x'.repeat(288)}@example.com`]
  ]
  for (const [i, [what, email]] of notAddresses.entries()) {
    const before = await stored()
    idp.tamperIdTokens((claims) => ({ ...claims, sub: `not-an-address-${i}-${Date.now()}`, email, email_verified: true }))
    try {
      const started = await start(t, `${APP}/welcome`)
      const res = await callback(await idp.signInAt(started.providerUrl, 'tamper-5'), started.browser)
      assertRedirect(t, res, `${APP}/welcome?error=EMAIL_INVALID`, what)
    } finally {
      idp.tamperIdTokens(null)
    }
    t.same(await stored(), before, `${what}: no account, identity, code or mail`)
  }
  t.notOk(sink.received.some((mail) => /ample\.test|elsewhere\.test/.test(mail.envelope.join(' '))), 'nothing mailed to where such a claim points')
})

t.test('a known identity signs in whatever its email says now', async (t) => {
  const subject = `known-${Date.now()}`
  idp.tamperIdTokens((claims) => ({ ...claims, sub: subject, email: uniqueEmail('known'), email_verified: true }))
  let first: URL
  try {
    first = await signInAt(t, 'tamper-5')
  } finally {
    idp.tamperIdTokens(null)
  }
  t.ok(first.searchParams.get('signin'), 'made with an address')
  idp.tamperIdTokens((claims) => ({ ...claims, sub: subject, email: 'w2@ex;ample.test', email_verified: true }))
  try {
    t.ok((await signInAt(t, 'tamper-5')).searchParams.get('signin'), 'signed in with no address at all now')
  } finally {
    idp.tamperIdTokens(null)
  }
})

t.test('linking stores the provider\'s email only when it is an address', async (t) => {
  const owner = await signedIn(t, 'owner-12')
  idp.tamperIdTokens((claims) => ({ ...claims, sub: `linked-odd-email-${Date.now()}`, email: `w2@ex;ample.test\r\nBcc: someone@elsewhere.test${'x'.repeat(300)}`, email_verified: true }))
  try {
    t.equal((await link(t, bearer(owner.token), 'owner-12')).searchParams.get('linked'), 'test', 'linked: the identity is the owner\'s')
  } finally {
    idp.tamperIdTokens(null)
  }
  const identities = json(await app.inject({ method: 'GET', url: '/account/identities', headers: bearer(owner.token) })).data as Array<{ email: string | null }>
  t.same(identities.map((identity) => identity.email).sort(), [owner.user.email, null].sort(), 'the odd one without an email')
})

t.test('whatever reaches the callback, it answers a redirect with error=', async (t) => {
  const home = `${APP}/?error=INVALID_STATE`
  const get = (url: string, browser = new Browser()) => browser.request('GET', url)
  assertRedirect(t, await get('/auth/providers/test/callback?code=c&state=a&state=b'), home, 'a repeated state')
  assertRedirect(t, await get(`/auth/providers/test/callback?code=c&state=${'s'.repeat(600)}`), home, 'an over-long state')
  assertRedirect(t, await get('/auth/providers/test/callback'), home, 'nothing at all')
  assertRedirect(t, await get('/auth/providers/test/callback?state=s&state=t&error=e&error=f&code=c&code=d&iss=i&iss=j'), home, 'everything repeated')
  assertRedirect(t, await get('/auth/providers/nope/callback?code=c&state=s'), `${APP}/?error=PROVIDER_NOT_FOUND`, 'an unknown provider')
  assertRedirect(t, await get('/auth/providers/No_Such!/callback?code=c&state=s'), `${APP}/?error=PROVIDER_NOT_FOUND`, 'a provider id that could not be one')

  // A live flow: the state is this browser's, what comes with it is not a sign-in.
  const withFlow = async (what: string, reshape: (url: URL) => void, expected: string) => {
    const started = await start(t)
    const flows = await count('oidc_flows')
    const back = await idp.signInAt(started.providerUrl, 'tamper-5')
    reshape(back)
    assertRedirect(t, await callback(back, started.browser), expected, what)
    t.equal(await count('oidc_flows'), flows - 1, `${what}: the flow is spent`)
  }
  await withFlow('an over-long error', (url) => url.searchParams.set('error', 'e'.repeat(300)), `${APP}/welcome?error=PROVIDER_REJECTED`)
  await withFlow('an over-long code', (url) => url.searchParams.set('code', 'c'.repeat(5000)), `${APP}/welcome?error=PROVIDER_REJECTED`)
  await withFlow('a repeated code', (url) => url.searchParams.append('code', 'another'), `${APP}/welcome?error=PROVIDER_REJECTED`)
  const started = await start(t)
  const back = await idp.signInAt(started.providerUrl, 'tamper-5')
  back.searchParams.append('state', back.searchParams.get('state')!)
  assertRedirect(t, await callback(back, started.browser), home, 'its state twice')
})

t.test('nothing makes the callback answer but a redirect: the global rate limit, a failure of our own (logged without the code or state)', async (t) => {
  const lines: string[] = []
  const watched = await buildKeepingLog(t, {
    LOG_LEVEL: 'warn', API_URL: API, APP_URL: APP, RATE_LIMIT_MAX: '4', OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: idp.issuer, OIDC_TEST_CLIENT_ID: client.clientId, OIDC_TEST_CLIENT_SECRET: client.clientSecret
  }, lines)

  const hurried = new Browser('Hurried', { api: watched, remoteAddress: '198.51.100.90' })
  const answers = []
  for (let i = 0; i < 5; i++) answers.push(await hurried.request('GET', '/auth/providers/test/callback?code=c&state=s'))
  for (const res of answers.slice(0, 4)) assertRedirect(t, res, `${APP}/?error=INVALID_STATE`, 'within the limit')
  assertRedirect(t, answers[4]!, `${APP}/?error=RATE_LIMITED`, 'past the global rate limit')

  // A subject longer than any identity's (OIDC Core: 255 at most) fails where it is stored.
  const browser = new Browser('Test Browser/1.0', { api: watched, remoteAddress: '198.51.100.91' })
  const started = await browser.request('GET', `/auth/providers/test/start?returnTo=${encodeURIComponent(`${APP}/welcome`)}`)
  t.equal(started.statusCode, 302)
  const back = await idp.signInAt(String(started.headers.location), 'tamper-5')
  idp.tamperIdTokens((claims) => ({ ...claims, sub: 's'.repeat(300) }))
  let res: LightMyRequestResponse
  try {
    res = await browser.request('GET', pathOf(back))
  } finally {
    idp.tamperIdTokens(null)
  }
  assertRedirect(t, res, `${APP}/welcome?error=SERVER_ERROR`, 'a failure behind a known flow: back to its returnTo')
  t.same(browser.bindings, [], 'the flow\'s cookie is cleared')
  const problems = lines.map((line) => JSON.parse(line) as { level: number, msg: string }).filter((entry) => entry.level >= 40)
  t.ok(problems.length > 0, 'the failure is logged')
  for (const secret of [back.searchParams.get('code')!, back.searchParams.get('state')!]) {
    t.notOk(lines.some((line) => line.includes(secret)), 'never the code nor the state')
  }
})

t.test('an account with two-step sign-in: the provider\'s exchange answers the challenge, and the code completes it', async (t) => {
  const owner = await registerUser(app)
  await verifyEmail(owner)
  t.equal((await link(t, owner.auth, 'two-step-13')).searchParams.get('linked'), 'test', 'the identity is linked')
  const enrol = await app.inject({ method: 'POST', url: '/account/mfa/totp', headers: owner.auth, payload: { currentPassword: owner.password } })
  const secret = json(enrol).data.secret as string
  t.equal((await app.inject({ method: 'POST', url: '/account/mfa/totp/confirm', headers: owner.auth, payload: { code: codeAt(secret) } })).statusCode, 200)

  const browser = new Browser()
  const landed = await signInAt(t, 'two-step-13', undefined, browser)
  const res = await exchange(landed.searchParams.get('signin')!, browser)
  t.equal(res.statusCode, 200)
  t.same(Object.keys(json(res)).sort(), ['methods', 'mfaRequired', 'mfaToken', 'success'], 'the provider\'s sign-in is not enough: no token')
  t.notOk(browser.jar.has('auth_token'), 'and no cookie')
  const done = await browser.request('POST', '/auth/mfa', { payload: { mfaToken: json(res).mfaToken, code: codeAt(secret, Date.now() + 30_000) } })
  t.equal(done.statusCode, 200)
  t.equal(json(done).user.id, owner.id)
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(json(done).token) })).data
  t.match(sessions.find((s: { current: boolean }) => s.current), { method: 'provider', provider: 'test', methods: ['provider', 'totp'] })
})
