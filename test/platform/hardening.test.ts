// Hostile input: CSRF on cookie sessions, CORS, security headers, prototype pollution,
// racing sign-ups, password bounds before hashing, a pattern that cannot backtrack.
// (Rate limits: test/accounts/rate-limits.test.ts; load shedding: test/platform/shedding.test.ts; equal cost
// for both kinds of failed sign-in: test/accounts/equal-work.test.ts.)
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { json, randomAddress as ip, registerUser, sharedApp, uniqueEmail } from '../support/helper.js'
import { PROJECT_ROOT } from '../support/paths.js'

// One app for the file: CORS_ORIGINS adds an origin, which no other test here relies on lacking.
const SETTINGS = { CORS_ORIGINS: 'https://admin.example.com' }

t.test('cookie sessions refuse unsafe requests from foreign origins; header tokens are unaffected', async (t) => {
  const app = await sharedApp(SETTINGS)
  const user = await registerUser(app)
  const cookie = { cookie: `auth_token=${user.token}` }
  const create = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/tasks', headers, payload: { title: 'csrf?' } })

  const foreign = await create({ ...cookie, origin: 'https://evil.example' })
  t.equal(foreign.statusCode, 403)
  t.same(json(foreign), { success: false, error: 'Forbidden', code: 'FORBIDDEN' })
  t.equal((await create({ ...cookie, 'sec-fetch-site': 'cross-site' })).statusCode, 403, 'cross-site fetch without Origin')
  t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: { ...cookie, origin: 'https://evil.example' } })).statusCode, 403)
  t.equal((await create({ ...cookie, origin: 'http://localhost:3000' })).statusCode, 201, 'our own web client')
  t.equal((await create(cookie)).statusCode, 201, 'non-browser clients send no Origin')
  t.equal((await create({ ...user.auth, origin: 'https://evil.example' })).statusCode, 201, 'a header token is never sent by a browser on its own')
  t.equal((await app.inject({ method: 'GET', url: '/tasks', headers: { ...cookie, origin: 'https://evil.example' } })).statusCode, 200, 'reads are safe (CORS keeps the answer from the other site)')
  const { count } = await app.db.selectFrom('tasks').select((eb) => eb.fn.countAll<number>().as('count')).where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(Number(count), 3, 'the refused requests stored nothing')
})

t.test('CORS_ORIGINS adds origins for CORS and cookie sessions', async (t) => {
  const app = await sharedApp(SETTINGS)
  const user = await registerUser(app)
  const preflight = await app.inject({ method: 'OPTIONS', url: '/tasks', headers: { origin: 'https://admin.example.com', 'access-control-request-method': 'POST' } })
  t.equal(preflight.headers['access-control-allow-origin'], 'https://admin.example.com')
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: { cookie: `auth_token=${user.token}`, origin: 'https://admin.example.com' }, payload: { title: 'ok' } })
  t.equal(res.statusCode, 201)
})

t.test('security headers suit a JSON API', async (t) => {
  const app = await sharedApp(SETTINGS)
  for (const url of ['/nope', '/health']) {
    const res = await app.inject({ method: 'GET', url })
    t.match(res.headers, {
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'cache-control': 'no-store',
      'referrer-policy': 'no-referrer',
      'cross-origin-resource-policy': 'same-site',
      'strict-transport-security': /max-age=\d+/
    }, url)
    t.notOk(res.headers['x-powered-by'], url)
    // Helmet's HTML-document headers are left out of JSON answers on purpose.
    t.notOk(res.headers['x-xss-protection'], url)
  }
})

t.test('prototype pollution keys are refused, nothing is stored', async (t) => {
  const app = await sharedApp(SETTINGS)
  const user = await registerUser(app)
  for (const payload of ['{"title":"x","__proto__":{"admin":true}}', '{"title":"x","constructor":{"prototype":{"admin":true}}}']) {
    const res = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'content-type': 'application/json' }, payload })
    t.equal(res.statusCode, 400, payload)
    t.same(json(res), { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' })
  }
  t.equal(({} as Record<string, unknown>).admin, undefined)
  const rows = await app.db.selectFrom('tasks').select('id').where('user_id', '=', user.id).execute()
  t.same(rows, [])
})

t.test('two concurrent sign-ups for one email in two cases: one account, one 409', async (t) => {
  const app = await sharedApp(SETTINGS)
  const email = uniqueEmail('race')
  const [a, b] = await Promise.all([email.toUpperCase(), email].map((address) =>
    app.inject({ method: 'POST', url: '/auth/register', payload: { email: address, password: 'correct horse battery' } })))
  t.same([a!.statusCode, b!.statusCode].sort(), [201, 409])
  const loser = a!.statusCode === 409 ? a! : b!
  t.same(json(loser), { success: false, error: 'Email already registered', code: 'EMAIL_TAKEN' })
  const rows = await app.db.selectFrom('users').select('email').where('email', '=', email).execute()
  t.same(rows, [{ email }])
})

t.test('over-long passwords are refused before any hashing', async (t) => {
  const app = await sharedApp(SETTINGS)
  const calls = { hash: 0, verify: 0 }
  const { hash, verify } = app.passwords
  app.passwords.hash = async (password) => { calls.hash++; return hash(password) }
  app.passwords.verify = async (password, stored) => { calls.verify++; return verify(password, stored) }
  t.teardown(() => { Object.assign(app.passwords, { hash, verify }) })

  // Long enough to be refused by its bytes, short enough to fit the form's body limit (a
  // 10 KiB password is refused as too large a body: test/platform/hostile-bodies.test.ts).
  const huge = 'p'.repeat(1024)
  const register = await app.inject({ method: 'POST', url: '/auth/register', payload: { email: uniqueEmail(), password: huge } })
  t.equal(register.statusCode, 400)
  t.same(json(register), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Password must be at most 72 bytes - password'] })
  const signIn = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: uniqueEmail(), password: huge } })
  t.equal(signIn.statusCode, 400)
  t.equal(json(signIn).error, 'Invalid input')
  const multibyte = await app.inject({ method: 'POST', url: '/auth/register', payload: { email: uniqueEmail(), password: 'é'.repeat(37) } })
  t.equal(multibyte.statusCode, 400)
  t.same(calls, { hash: 0, verify: 0 }, 'bcrypt never ran')
})

t.test('the installed fast-jwt (under @fastify/jwt) is at least 6.3.1', async (t) => {
  const lock = JSON.parse(await readFile(join(PROJECT_ROOT, 'package-lock.json'), 'utf8'))
  const version: string = lock.packages['node_modules/fast-jwt'].version
  const [major, minor, patch] = version.split('.').map(Number) as [number, number, number]
  t.ok(major > 6 || (major === 6 && (minor > 3 || (minor === 3 && patch >= 1))), `fast-jwt ${version}`)
})

t.test('an email of dotted labels is refused at once (the email pattern is linear)', { timeout: 60_000 }, async (t) => {
  const app = await sharedApp(SETTINGS)
  // The earlier pattern backtracked quadratically on this: 50 k characters took 6 s, a
  // megabyte minutes of the event loop, every other request waiting behind it. The forms'
  // body limits now refuse a megabyte before it is read; what fits them still meets the pattern.
  for (const [email, status] of [[`a@${'a.'.repeat(2_000)} x`, 400], [`a@${'a.'.repeat(500_000)} x`, 413]] as const) {
    for (const url of ['/auth/login', '/auth/register']) {
      const res = await app.inject({ method: 'POST', url, remoteAddress: ip(), payload: { email, password: 'correct horse battery' } })
      t.equal(res.statusCode, status, `${url}, ${email.length} characters`)
      if (status === 400) t.match(json(res), { success: false, details: ['Invalid email address - email'] })
    }
  }
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200)
})
