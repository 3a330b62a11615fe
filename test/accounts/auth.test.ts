// Sign-up, sign-in, the current user and sign-out: bodies, the auth cookie, what is
// stored, and every way a token must fail (forged here with node:crypto).
import { createHmac, randomUUID } from 'node:crypto'
import bcrypt from 'bcryptjs'
import type { LightMyRequestResponse } from 'fastify'
import t, { type Test } from 'tap'
import { build, json, registerUser, sharedApp, TEST_SECRET, testConfig, uniqueEmail } from '../support/helper.js'

const APP_URL = 'http://localhost:3000'
const API_URL = 'http://localhost:3002'
const SEVEN_DAYS = 7 * 24 * 60 * 60
const UNAUTHORIZED = { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' }
const USER_KEYS = ['createdAt', 'email', 'emailVerified', 'id', 'image', 'name', 'updatedAt']
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

const app = await sharedApp()

type Claims = Record<string, unknown>

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
const nowSeconds = () => Math.floor(Date.now() / 1000)

/** A JWT signed here, so tests can forge what the service must refuse. */
function sign (payload: Claims, { alg = 'HS256', secret = TEST_SECRET }: { alg?: 'HS256' | 'HS512' | 'none', secret?: string } = {}): string {
  const input = `${b64url({ alg, typ: 'JWT' })}.${b64url(payload)}`
  if (alg === 'none') return `${input}.`
  const hash = alg === 'HS256' ? 'sha256' : 'sha512'
  return `${input}.${createHmac(hash, secret).update(input).digest('base64url')}`
}

function decodePart (token: string, index: 0 | 1): Claims {
  const part = token.split('.')[index]
  if (part === undefined) throw new Error(`not a JWT: ${token}`)
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as Claims
}

const me = (headers: Record<string, string>) => app.inject({ method: 'GET', url: '/auth/me', headers })
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const register = (payload: unknown) => app.inject({ method: 'POST', url: '/auth/register', payload: payload as Record<string, unknown> })
const login = (payload: unknown) => app.inject({ method: 'POST', url: '/auth/login', payload: payload as Record<string, unknown> })

function authCookie (res: LightMyRequestResponse) {
  const cookies = res.cookies.filter((c) => c.name === 'auth_token')
  return cookies.length === 1 ? cookies[0] : undefined
}

function setCookieHeader (res: LightMyRequestResponse): string {
  const header = res.headers['set-cookie']
  return [header ?? []].flat().join('\n')
}

/** A 400 Validation failed naming exactly these fields, each detail `<message> - <field>`. */
function assertValidationFailed (t: Test, res: LightMyRequestResponse, fields: string[], error = 'Validation failed') {
  t.equal(res.statusCode, 400)
  const body = json(res)
  t.same(Object.keys(body).sort(), ['code', 'details', 'error', 'success'])
  t.equal(body.success, false)
  t.equal(body.error, error)
  t.ok(Array.isArray(body.details), 'details is an array')
  const details = (body.details ?? []) as string[]
  for (const detail of details) t.match(detail, /^\S.* - \S+$/, `detail "${detail}" is <message> - <field>`)
  t.same(details.map((d) => d.slice(d.lastIndexOf(' - ') + 3)).sort(), [...fields].sort(), 'details name the failing fields')
  return details
}

async function usersWithEmail (email: string) {
  return app.db.selectFrom('users').select(['id']).where('email', '=', email).execute()
}

// Registered once and reused: bcrypt costs ~0.5 s per register or login.
const ada = { email: uniqueEmail('ada'), password: 'correct horse battery', name: 'Ada Lovelace' }
let adaId = ''
let adaToken = ''

t.test('POST /auth/register', async (t) => {
  t.test('201 with token and the public user; signs in with the auth cookie', async (t) => {
    const before = nowSeconds()
    const res = await register({ name: ada.name, email: `  ${ada.email.toUpperCase()} `, password: ada.password })
    t.equal(res.statusCode, 201)
    const body = json(res)
    t.same(Object.keys(body).sort(), ['success', 'token', 'user'])
    t.equal(body.success, true)
    t.type(body.token, 'string')
    t.same(Object.keys(body.user).sort(), USER_KEYS)
    t.match(body.user, { id: UUID, name: ada.name, email: ada.email, image: null, emailVerified: null, createdAt: ISO, updatedAt: ISO })
    t.equal(body.user.image, null)
    t.equal(body.user.emailVerified, null)
    t.notMatch(res.body, /password/i, 'no password key anywhere in the body')
    t.notMatch(res.body, /\$2[aby]\$/, 'no hash in the body')
    t.notMatch(res.body, ada.password)
    adaId = body.user.id
    adaToken = body.token

    const cookie = authCookie(res)
    t.ok(cookie, 'exactly one auth_token cookie')
    t.equal(cookie?.value, body.token)
    t.equal(cookie?.httpOnly, true)
    t.equal(cookie?.sameSite, 'Lax')
    t.equal(cookie?.path, '/')
    t.equal(cookie?.maxAge, SEVEN_DAYS)
    t.notOk(cookie?.secure, 'no Secure for an http API_URL')
    const raw = setCookieHeader(res)
    t.match(raw, /(^|;\s*)HttpOnly(;|$)/i)
    t.match(raw, /(^|;\s*)SameSite=Lax(;|$)/i)
    t.match(raw, /(^|;\s*)Path=\/(;|$)/)
    t.match(raw, /(^|;\s*)Max-Age=604800(;|$)/)
    t.notMatch(raw, /Secure/i)

    // The token: HS256, claims per spec §5.1 plus a jti.
    t.same(decodePart(body.token, 0), { alg: 'HS256', typ: 'JWT' })
    const claims = decodePart(body.token, 1)
    t.equal(claims.sub, adaId)
    t.equal(claims.email, ada.email)
    t.type(claims.jti, 'string')
    t.ok((claims.jti as string).length > 0, 'jti is not empty')
    t.equal(claims.iss, APP_URL)
    t.equal(claims.aud, API_URL)
    t.type(claims.iat, 'number')
    t.type(claims.exp, 'number')
    t.equal((claims.exp as number) - (claims.iat as number), SEVEN_DAYS)
    t.ok((claims.iat as number) >= before - 5 && (claims.iat as number) <= nowSeconds() + 5, 'iat is the time of issue')

    // What is stored: the normalized email and a bcrypt hash at the configured cost (4 in
    // test/support/helper.ts; the default 12 is checked in test/platform/shedding.test.ts), never the password.
    const row = await app.db.selectFrom('users').selectAll().where('id', '=', adaId).executeTakeFirstOrThrow()
    t.equal(row.email, ada.email)
    t.equal(row.name, ada.name)
    t.not(row.password, ada.password)
    t.match(row.password, /^\$2[aby]\$04\$[./A-Za-z0-9]{53}$/)
    t.ok(await bcrypt.compare(ada.password, row.password!), 'the hash is of the submitted password')
    t.equal(body.user.createdAt, row.created_at)
    t.equal(body.user.updatedAt, row.updated_at)

    const prefs = await app.db.selectFrom('user_preferences').selectAll().where('user_id', '=', adaId).execute()
    t.equal(prefs.length, 1, 'one default preferences row')
    t.match(prefs[0], {
      theme: 'system',
      language: 'en',
      plan: 'free',
      default_status: 'todo',
      email_notifications: true,
      task_reminders: true,
      weekly_digest: false,
      cancel_at_period_end: false,
      payment_customer_id: null,
      payment_subscription_id: null,
      payment_subscription_status: null,
      payment_price_id: null,
      payment_current_period_end: null
    })

    const current = await me(bearer(body.token))
    t.equal(current.statusCode, 200)
    t.same(json(current), { success: true, data: body.user })
  })

  t.test('duplicate email is case- and blank-insensitive: 409', async (t) => {
    const first = await register({ email: 'A@x.io', password: 'first password' })
    t.equal(first.statusCode, 201)
    t.equal(json(first).user.email, 'a@x.io')
    t.equal(json(first).user.name, null, 'name is optional')
    const second = await register({ email: ' a@X.IO ', password: 'second password', name: 'Impostor' })
    t.equal(second.statusCode, 409)
    t.same(json(second), { success: false, error: 'Email already registered', code: 'EMAIL_TAKEN' })
    t.equal(authCookie(second), undefined, 'no cookie on failure')
    const rows = await app.db.selectFrom('users').select(['id', 'name']).where('email', '=', 'a@x.io').execute()
    t.same(rows, [{ id: json(first).user.id, name: null }], 'the first account is untouched')
  })

  t.test('validation failures: 400 Validation failed, nothing stored', async (t) => {
    const email = uniqueEmail('invalid')
    const cases: Array<[string, Record<string, unknown>, string[], RegExp?]> = [
      ['missing email', { password: 'long enough password' }, ['email'], /^(Email is required|Invalid email address) - email$/],
      ['bad email', { email: 'not-an-email', password: 'long enough password' }, ['email'], /^Invalid email address - email$/],
      ['password of 7 characters', { email, password: 'x'.repeat(7) }, ['password'], /^Password must be at least 8 characters - password$/],
      ['73-byte ASCII password', { email, password: 'x'.repeat(73) }, ['password'], /^Password must be at most 72 bytes - password$/],
      ['37 × é: 37 characters but 74 bytes', { email, password: 'é'.repeat(37) }, ['password'], /^Password must be at most 72 bytes - password$/],
      ['unknown field plan', { email, password: 'long enough password', plan: 'pro' }, ['plan']],
      ['name over 255 characters', { email, password: 'long enough password', name: 'n'.repeat(256) }, ['name']],
      ['email over 255 characters', { email: `${'e'.repeat(250)}@example.com`, password: 'long enough password' }, ['email']]
    ]
    for (const [label, payload, fields, message] of cases) {
      await t.test(label, async (t) => {
        const res = await register(payload)
        const details = assertValidationFailed(t, res, fields)
        if (message !== undefined) t.match(details[0], message)
        t.equal(authCookie(res), undefined, 'no cookie')
      })
    }
    t.same(await usersWithEmail(email), [], 'no account was created')
    t.same(await usersWithEmail('not-an-email'), [])
  })

  t.test('a 72-byte password (36 × é) is accepted', async (t) => {
    const res = await register({ email: uniqueEmail('bytes'), password: 'é'.repeat(36) })
    t.equal(res.statusCode, 201)
    const login36 = await login({ email: json(res).user.email, password: 'é'.repeat(36) })
    t.equal(login36.statusCode, 200)
  })
})

t.test('POST /auth/login', async (t) => {
  t.test('200 with token and user; the email matches case-insensitively', async (t) => {
    const res = await login({ email: ` ${ada.email.toUpperCase()}  `, password: ada.password })
    t.equal(res.statusCode, 200)
    const body = json(res)
    t.same(Object.keys(body).sort(), ['success', 'token', 'user'])
    t.equal(body.success, true)
    t.same(Object.keys(body.user).sort(), USER_KEYS)
    t.match(body.user, { id: adaId, name: ada.name, email: ada.email, image: null, emailVerified: null, createdAt: ISO, updatedAt: ISO })
    t.notMatch(res.body, /password/i)
    t.not(body.token, adaToken, 'a fresh token')
    const claims = decodePart(body.token, 1)
    t.equal(claims.sub, adaId)
    t.equal(claims.email, ada.email)
    t.not(claims.jti, decodePart(adaToken, 1).jti, 'a fresh jti per sign-in')

    const cookie = authCookie(res)
    t.equal(cookie?.value, body.token)
    t.equal(cookie?.httpOnly, true)
    t.equal(cookie?.sameSite, 'Lax')
    t.equal(cookie?.path, '/')
    t.equal(cookie?.maxAge, SEVEN_DAYS)

    const current = await me(bearer(body.token))
    t.same(json(current), { success: true, data: body.user })
  })

  t.test('wrong password and unknown email: the same 401', async (t) => {
    const wrong = await login({ email: ada.email, password: 'not the password' })
    const unknown = await login({ email: uniqueEmail('nobody'), password: ada.password })
    for (const res of [wrong, unknown]) {
      t.equal(res.statusCode, 401)
      t.same(json(res), { success: false, error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' })
      t.equal(authCookie(res), undefined, 'no cookie')
    }
    t.equal(wrong.body, unknown.body, 'byte-identical bodies')
  })

  t.test('bad email and short password: 400 Invalid input with the spec messages', async (t) => {
    const res = await login({ email: 'not-an-email', password: '12345' })
    t.equal(res.statusCode, 400)
    const body = json(res)
    t.same({ ...body, details: [...body.details].sort() }, {
      success: false,
      error: 'Invalid input',
      code: 'INVALID_INPUT',
      details: ['Invalid email address - email', 'Password must be at least 6 characters - password']
    })
  })

  t.test('missing fields: 400 Invalid input naming both', async (t) => {
    assertValidationFailed(t, await login({}), ['email', 'password'], 'Invalid input')
  })

  t.test('a 6-character password passes validation (and is then checked)', async (t) => {
    const res = await login({ email: ada.email, password: '123456' })
    t.equal(res.statusCode, 401)
    t.same(json(res), { success: false, error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' })
  })
})

t.test('GET /auth/me and token transport', async (t) => {
  const adaUser = json(await me(bearer(adaToken))).data

  t.test('with the Authorization header', async (t) => {
    const res = await me(bearer(adaToken))
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: adaUser })
    t.same(Object.keys(adaUser).sort(), USER_KEYS)
  })

  t.test('with only the cookie', async (t) => {
    const res = await me({ cookie: `auth_token=${adaToken}` })
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: adaUser })
  })

  t.test('the header wins over the cookie', async (t) => {
    const badHeader = await me({ cookie: `auth_token=${adaToken}`, authorization: 'Bearer not.a.token' })
    t.equal(badHeader.statusCode, 401)
    t.same(json(badHeader), UNAUTHORIZED)
    const badCookie = await me({ cookie: 'auth_token=not.a.token', ...bearer(adaToken) })
    t.equal(badCookie.statusCode, 200)
    t.same(json(badCookie), { success: true, data: adaUser })
  })

  t.test('no token: 401', async (t) => {
    const res = await me({})
    t.equal(res.statusCode, 401)
    t.same(json(res), UNAUTHORIZED)
  })
})

t.test('tokens the service must refuse', async (t) => {
  const real = decodePart(adaToken, 1)
  const now = nowSeconds()
  // The claims of a token the service issued, freshly dated: the baseline every case alters.
  const valid = (): Claims => ({ ...real, jti: randomUUID(), iat: now, exp: now + 3600 })

  t.test('control: a token forged with the right secret and claims is accepted', async (t) => {
    const res = await me(bearer(sign(valid())))
    t.equal(res.statusCode, 200, 'the forging helper makes tokens the service accepts')
    t.equal(json(res).data?.id, adaId)
  })

  t.test('the service signs exactly the claims of spec §5.1 and a jti; a token with just those verifies', async (t) => {
    t.same(Object.keys(real).sort(), ['aud', 'email', 'exp', 'iat', 'iss', 'jti', 'sub'])
    t.equal(Number(real.exp) - Number(real.iat), SEVEN_DAYS)
    // What another part of the deployment holding the secret (the origin's web middleware) signs.
    const documented = { sub: adaId, email: ada.email, iss: APP_URL, aud: API_URL, iat: now, exp: now + SEVEN_DAYS, jti: randomUUID() }
    const res = await me(bearer(sign(documented)))
    t.equal(res.statusCode, 200)
    t.equal(json(res).data?.id, adaId)
  })

  const other = await registerUser(app, { email: uniqueEmail('other') })
  const without = (claim: keyof Claims) => {
    const claims = valid()
    delete claims[claim]
    return sign(claims)
  }
  const [head, payload, signature] = adaToken.split('.') as [string, string, string]
  const flipped = (signature.startsWith('A') ? 'B' : 'A') + signature.slice(1)

  const cases: Array<[string, string]> = [
    ['expired', sign({ ...valid(), iat: now - 2 * SEVEN_DAYS, exp: now - 3600 })],
    ['not yet valid (nbf in the future)', sign({ ...valid(), nbf: now + 3600 })],
    ['wrong iss', sign({ ...valid(), iss: 'http://evil.example' })],
    ['wrong aud', sign({ ...valid(), aud: 'http://localhost:9999' })],
    ['alg none', sign(valid(), { alg: 'none' })],
    ['HS512 with the right secret', sign(valid(), { alg: 'HS512' })],
    ['signed with another secret', sign(valid(), { secret: 'another-secret-that-is-long-enough-9876543210' })],
    ['missing exp', without('exp')],
    ['missing iat', without('iat')],
    ['missing jti', without('jti')],
    ['missing sub', without('sub')],
    ['signature tampered', `${head}.${payload}.${flipped}`],
    ['payload sub tampered (to another real user)', `${head}.${b64url({ ...real, sub: other.id })}.${signature}`],
    ['garbage', 'not-a-jwt']
  ]
  for (const [label, token] of cases) {
    t.test(`${label}: 401`, async (t) => {
      const viaHeader = await me(bearer(token))
      t.equal(viaHeader.statusCode, 401)
      t.same(json(viaHeader), UNAUTHORIZED)
      const viaCookie = await me({ cookie: `auth_token=${token}` })
      t.equal(viaCookie.statusCode, 401, 'also refused as the cookie')
      t.same(json(viaCookie), UNAUTHORIZED)
    })
  }

  // Verified tokens are kept (plugins/external/jwt.ts): what was accepted once is not accepted
  // for good. Each case uses the token first, so its verdict is kept, then tries it again.
  t.test('a token accepted before is refused once it has expired', async (t) => {
    const exp = nowSeconds() + 2
    const shortLived = sign({ ...valid(), exp })
    t.equal((await me(bearer(shortLived))).statusCode, 200, 'accepted while it is valid')
    await new Promise((resolve) => setTimeout(resolve, exp * 1000 + 1_000 - Date.now()))
    const res = await me(bearer(shortLived))
    t.equal(res.statusCode, 401, 'refused after its exp, though it verified before')
    t.same(json(res), UNAUTHORIZED)
  })

  t.test('a token accepted before, its signature altered, is refused', async (t) => {
    const token = sign(valid())
    t.equal((await me(bearer(token))).statusCode, 200)
    const [h, p, s] = token.split('.') as [string, string, string]
    const altered = `${h}.${p}.${(s.startsWith('A') ? 'B' : 'A') + s.slice(1)}`
    t.equal((await me(bearer(altered))).statusCode, 401)
    t.equal((await me(bearer(`${h}.${b64url({ ...decodePart(token, 1), sub: other.id })}.${s}`))).statusCode, 401, 'nor its claims')
  })

  t.test('the other user is fine with their own token', async (t) => {
    const res = await me(other.auth)
    t.equal(res.statusCode, 200)
    t.equal(json(res).data?.id, other.id)
  })
})

t.test('POST /auth/logout', async (t) => {
  t.test('revokes the presented token and clears the cookie; other sessions live on', async (t) => {
    const user = await registerUser(app, { email: uniqueEmail('logout') })
    const second = json(await login({ email: user.email, password: user.password })).token as string
    const jti = decodePart(user.token, 1).jti as string
    const exp = decodePart(user.token, 1).exp as number

    const res = await app.inject({ method: 'POST', url: '/auth/logout', headers: user.auth })
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: null })
    const cookie = authCookie(res)
    t.ok(cookie, 'an auth_token cookie is set')
    t.equal(cookie?.value, '')
    t.equal(cookie?.path, '/')
    const cleared = cookie?.maxAge === 0 || (cookie?.expires !== undefined && cookie.expires.getTime() < Date.now())
    t.ok(cleared, 'Max-Age=0 or Expires in the past')

    const revoked = await app.db.selectFrom('revoked_tokens').selectAll().where('jti', '=', jti).execute()
    t.equal(revoked.length, 1, 'the jti is stored as revoked')
    t.equal(revoked[0]?.user_id, user.id)
    t.equal(Date.parse(revoked[0]?.expires_at ?? ''), exp * 1000, 'kept until the token would expire')

    const again = await me(user.auth)
    t.equal(again.statusCode, 401)
    t.same(json(again), UNAUTHORIZED)
    const asCookie = await me({ cookie: `auth_token=${user.token}` })
    t.equal(asCookie.statusCode, 401, 'revoked as a cookie too')
    const secondLogout = await app.inject({ method: 'POST', url: '/auth/logout', headers: user.auth })
    t.equal(secondLogout.statusCode, 401)
    t.same(json(secondLogout), UNAUTHORIZED)

    const other = await me(bearer(second))
    t.equal(other.statusCode, 200, 'a second token of the same user still works')
    t.equal(json(other).data?.id, user.id)
  })

  t.test('the scheduler purges revocations a day after their tokens expired, and keeps the others', async (t) => {
    const user = await registerUser(app, { email: uniqueEmail('purge-revocations') })
    const [expired, justExpired, live] = [randomUUID(), randomUUID(), randomUUID()]
    const ago = (ms: number) => new Date(Date.now() - ms).toISOString()
    await app.db.insertInto('revoked_tokens').values([
      { jti: expired, user_id: user.id, expires_at: ago(25 * 3_600_000) },
      // Expired by the app's clock an hour ago: a database clock behind it, or an app clock
      // ahead, could still accept it, and for a token signed elsewhere this row is all that
      // refuses it. Kept for a day, like sessions.
      { jti: justExpired, user_id: user.id, expires_at: ago(3_600_000) },
      { jti: live, user_id: user.id, expires_at: ago(-3_600_000) }
    ]).execute()
    await app.jobs.runOnce('auth.purge-revocations')
    const kept = await app.db.selectFrom('revoked_tokens').select('jti').where('user_id', '=', user.id).execute()
    t.same(kept.map((row) => row.jti).sort(), [justExpired, live].sort())
  })

  t.test('with the cookie only', async (t) => {
    const fresh = json(await login({ email: ada.email, password: ada.password })).token as string
    const res = await app.inject({ method: 'POST', url: '/auth/logout', headers: { cookie: `auth_token=${fresh}` } })
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: null })
    t.equal((await me(bearer(fresh))).statusCode, 401)
    t.equal((await me(bearer(adaToken))).statusCode, 200, 'the registration token is untouched')
  })

  t.test('without a token: 401', async (t) => {
    const res = await app.inject({ method: 'POST', url: '/auth/logout' })
    t.equal(res.statusCode, 401)
    t.same(json(res), UNAUTHORIZED)
  })
})

t.test('a deleted user: every token of theirs is 401', async (t) => {
  const user = await registerUser(app, { email: uniqueEmail('deleted') })
  const forged = sign({ ...decodePart(user.token, 1), jti: randomUUID() })
  t.equal((await me(bearer(forged))).statusCode, 200, 'a second token works before deletion')

  const res = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
  t.equal(res.statusCode, 200)
  t.same(json(res), { success: true, data: { deleted: true } })
  t.same(await usersWithEmail(user.email), [])

  for (const token of [user.token, forged]) {
    const after = await me(bearer(token))
    t.equal(after.statusCode, 401)
    t.same(json(after), UNAUTHORIZED)
  }
  const relogin = await login({ email: user.email, password: user.password })
  t.equal(relogin.statusCode, 401)
  t.same(json(relogin), { success: false, error: 'Invalid email or password', code: 'INVALID_CREDENTIALS' })
})

t.test('Secure cookie when API_URL is https', async (t) => {
  const config = await testConfig(t, { API_URL: 'https://api.example.com' })
  const secureApp = await build(t, {}, config)
  const res = await secureApp.inject({ method: 'POST', url: '/auth/register', payload: { email: uniqueEmail('secure'), password: 'long enough password' } })
  t.equal(res.statusCode, 201)
  const cookie = authCookie(res)
  t.equal(cookie?.secure, true)
  t.match(setCookieHeader(res), /(^|;\s*)Secure(;|$)/i)
  t.equal(decodePart(json(res).token, 1).aud, 'https://api.example.com', 'aud is API_URL')
})
