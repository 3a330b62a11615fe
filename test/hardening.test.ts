// Abuse and hostile input: rate limits, CSRF on cookie sessions, security headers,
// prototype pollution, racing sign-ups, password bounds before hashing, load shedding.
// (Equal cost for both kinds of failed sign-in: test/login-timing.test.ts.)
import { randomInt } from 'node:crypto'
import t from 'tap'
import { build, json, registerUser, uniqueEmail } from './helper.js'

// Each run uses its own client addresses, so parallel runs sharing Redis never share counters.
const ip = () => `10.${randomInt(256)}.${randomInt(256)}.${randomInt(1, 255)}`
const login = (app: Awaited<ReturnType<typeof build>>, email: string, remoteAddress: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/auth/login', remoteAddress, headers, payload: { email, password: 'not the password' } })

t.test('sign-in is limited per client address: 429 envelope with Retry-After', async (t) => {
  const app = await build(t, { AUTH_RATE_LIMIT_MAX: '3' })
  const address = ip()
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await login(app, uniqueEmail(), address)).statusCode)
  t.same(statuses, [401, 401, 401, 429], 'the fourth attempt from one address is refused')
  const limited = await login(app, uniqueEmail(), address)
  t.same(json(limited), { success: false, error: 'Too many requests', code: 'RATE_LIMITED' })
  t.match(limited.headers['retry-after'], /^\d+$/)
  t.equal((await login(app, uniqueEmail(), ip())).statusCode, 401, 'another address is not affected')
})

t.test('failures per email: guessers are slowed, the owner is not locked out', async (t) => {
  const app = await build(t, { AUTH_RATE_LIMIT_MAX: '3' })
  const owner = await registerUser(app, { email: uniqueEmail('owner'), password: 'the owner knows this' })
  const attackers = Array.from({ length: 5 }, ip)
  const guesses = []
  // Whatever the case of the email: it is one account.
  for (const address of attackers) guesses.push((await login(app, owner.email.toUpperCase(), address)).statusCode)
  t.same(guesses, [401, 401, 401, 401, 401], 'each address with no failure yet gets its one attempt')
  const again = await login(app, owner.email, attackers[0]!)
  t.equal(again.statusCode, 429, 'an address that failed waits once the email is past its failures')
  t.same(json(again), { success: false, error: 'Too many requests', code: 'RATE_LIMITED' })
  t.match(again.headers['retry-after'], /^\d+$/)

  const signIn = await app.inject({ method: 'POST', url: '/auth/login', remoteAddress: ip(), payload: { email: owner.email, password: 'the owner knows this' } })
  t.equal(signIn.statusCode, 200, 'the owner signs in from an address that has not failed')
  t.equal((await login(app, owner.email, attackers[1]!)).statusCode, 401, 'a success forgets the email\'s failures')

  const other = await registerUser(app, { email: uniqueEmail('bystander') })
  t.equal((await login(app, other.email, attackers[2]!)).statusCode, 401, 'failures on one email do not hold an address back on another')
})

t.test('a password change is limited and admitted like sign-in', async (t) => {
  const app = await build(t, { AUTH_RATE_LIMIT_MAX: '3', BCRYPT_WORKERS: '1', BCRYPT_QUEUE_MAX: '0' })
  const user = await registerUser(app, { password: 'the first password' })
  const address = ip()
  const change = (currentPassword: string, remoteAddress = address) => app.inject({
    method: 'PATCH', url: '/account/profile', headers: user.auth, remoteAddress, payload: { currentPassword, newPassword: 'a new password' }
  })
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await change(`guess ${i}`)).statusCode)
  t.same(statuses, [400, 400, 400, 429], 'a stolen token guesses the current password no faster than sign-in allows')
  t.same(json(await change('guess 5')), { success: false, error: 'Too many requests', code: 'RATE_LIMITED' })

  const hashing = app.passwords.verify('occupies the only thread', undefined)
  const shed = await change('the first password', ip())
  t.equal(shed.statusCode, 503, 'a full hashing pool sheds the change before it queues')
  t.same(json(shed), { success: false, error: 'Service unavailable', code: 'OVERLOADED' })
  await hashing
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: user.auth })).statusCode, 200, 'nothing changed: the token still works')
})

t.test('the global limit counts requests before authentication: a 429 costs no token query', async (t) => {
  const app = await build(t, { RATE_LIMIT_MAX: '5' })
  const user = await registerUser(app)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: user.auth, remoteAddress: ip() })).statusCode, 200)
  let queries = 0
  const executeQuery = app.db.executeQuery.bind(app.db)
  Object.assign(app.db, { executeQuery: (query: Parameters<typeof executeQuery>[0]) => { queries++; return executeQuery(query) } })
  t.teardown(() => { Reflect.deleteProperty(app.db, 'executeQuery') })
  const address = ip()
  const statuses = []
  for (let i = 0; i < 10; i++) statuses.push((await app.inject({ method: 'GET', url: '/auth/me', headers: user.auth, remoteAddress: address })).statusCode)
  t.same(statuses, [401, 401, 401, 401, 401, 429, 429, 429, 429, 429], 'a revoked token is counted like any request')
  t.equal(queries, 5, 'only the five requests under the limit looked the token up')
})

t.test('a global per-IP ceiling covers every route but the health checks', async (t) => {
  const app = await build(t, { RATE_LIMIT_MAX: '5' })
  const address = ip()
  const user = await registerUser(app)
  const statuses = []
  for (let i = 0; i < 7; i++) statuses.push((await app.inject({ method: 'GET', url: '/tasks', headers: user.auth, remoteAddress: address })).statusCode)
  t.same(statuses, [200, 200, 200, 200, 200, 429, 429])
  for (let i = 0; i < 7; i++) {
    t.equal((await app.inject({ method: 'GET', url: '/health', remoteAddress: address })).statusCode, 200)
  }
})

t.test('X-Forwarded-For counts only when TRUST_PROXY says so', async (t) => {
  const untrusting = await build(t, { AUTH_RATE_LIMIT_MAX: '2' })
  const proxy = ip()
  const spoofed = []
  for (let i = 0; i < 3; i++) spoofed.push((await login(untrusting, uniqueEmail(), proxy, { 'x-forwarded-for': ip() })).statusCode)
  t.same(spoofed, [401, 401, 429], 'a client cannot dodge the limit by inventing addresses')

  const trusting = await build(t, { AUTH_RATE_LIMIT_MAX: '2', TRUST_PROXY: 'true' })
  const behindProxy = []
  for (let i = 0; i < 3; i++) behindProxy.push((await login(trusting, uniqueEmail(), proxy, { 'x-forwarded-for': ip() })).statusCode)
  t.same(behindProxy, [401, 401, 401], 'behind a trusted proxy each client has its own bucket')
})

t.test('with REDIS_URL two instances share one counter', async (t) => {
  const env = { AUTH_RATE_LIMIT_MAX: '3', REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' }
  const a = await build(t, env)
  const b = await build(t, env)
  const address = ip()
  const statuses = []
  for (const app of [a, b, a, b]) statuses.push((await login(app, uniqueEmail(), address)).statusCode)
  t.same(statuses, [401, 401, 401, 429])

  // Failures per email are shared too: three addresses fail on instance a, one of them is
  // held back on instance b.
  const target = uniqueEmail('shared-target')
  const guessers = [ip(), ip(), ip()]
  for (const guesser of guessers) t.equal((await login(a, target, guesser)).statusCode, 401)
  t.equal((await login(b, target, guessers[0]!)).statusCode, 429)
})

t.test('cookie sessions refuse unsafe requests from foreign origins; header tokens are unaffected', async (t) => {
  const app = await build(t)
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
  const app = await build(t, { CORS_ORIGINS: 'https://admin.example.com' })
  const user = await registerUser(app)
  const preflight = await app.inject({ method: 'OPTIONS', url: '/tasks', headers: { origin: 'https://admin.example.com', 'access-control-request-method': 'POST' } })
  t.equal(preflight.headers['access-control-allow-origin'], 'https://admin.example.com')
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: { cookie: `auth_token=${user.token}`, origin: 'https://admin.example.com' }, payload: { title: 'ok' } })
  t.equal(res.statusCode, 201)
})

t.test('a full password-hashing queue answers 503 with Retry-After at once, before any hash', async (t) => {
  // One hash at a time and one waiting: of six concurrent sign-ins four are shed.
  const app = await build(t, { BCRYPT_WORKERS: '1', BCRYPT_QUEUE_MAX: '1' })
  const finished: Array<{ status: number, retryAfter: unknown, body: unknown }> = []
  await Promise.all(Array.from({ length: 6 }, async () => {
    const res = await login(app, uniqueEmail(), ip())
    finished.push({ status: res.statusCode, retryAfter: res.headers['retry-after'], body: json(res) })
  }))
  t.same(finished.map((f) => f.status), [503, 503, 503, 503, 401, 401], 'the shed ones answered before either hash finished')
  for (const shed of finished.slice(0, 4)) {
    t.same(shed.body, { success: false, error: 'Service unavailable', code: 'OVERLOADED' })
    t.equal(shed.retryAfter, '5')
  }
  t.equal((await login(app, uniqueEmail(), ip())).statusCode, 401, 'once the queue drains, sign-ins are served again')

  // No queue at all: only what the thread is hashing is served.
  const unqueued = await build(t, { BCRYPT_WORKERS: '1', BCRYPT_QUEUE_MAX: '0' })
  const statuses = (await Promise.all(Array.from({ length: 3 }, () => login(unqueued, uniqueEmail(), ip())))).map((res) => res.statusCode)
  t.same(statuses.sort(), [401, 503, 503], 'BCRYPT_QUEUE_MAX=0 sheds too (not a 500)')
})

t.test('a shed sign-in or sign-up costs no database query', async (t) => {
  const app = await build(t, { BCRYPT_WORKERS: '1', BCRYPT_QUEUE_MAX: '0' })
  const known = await registerUser(app)
  // Count what the auth routes ask of the users table from here on.
  const tables: string[] = []
  const selectFrom = app.db.selectFrom.bind(app.db)
  Object.assign(app.db, { selectFrom: (table: any) => { tables.push(String(table)); return selectFrom(table) } })
  t.teardown(() => { Reflect.deleteProperty(app.db, 'selectFrom') })

  const hashing = app.passwords.verify('occupies the only thread', undefined)
  const signIn = await login(app, known.email, ip())
  const signUp = await app.inject({ method: 'POST', url: '/auth/register', remoteAddress: ip(), payload: { email: uniqueEmail('shed'), password: 'correct horse battery' } })
  t.same([signIn.statusCode, signUp.statusCode], [503, 503])
  t.same(json(signUp), { success: false, error: 'Service unavailable', code: 'OVERLOADED' })
  t.equal(signIn.headers['retry-after'], '5')
  t.same(tables, [], 'neither looked the email up')
  t.equal(await hashing, false)

  t.equal((await login(app, known.email, ip())).statusCode, 401, 'with the thread free again, sign-in is served')
  t.same(tables, ['users'], 'and looks the user up')
})

t.test('security headers suit a JSON API', async (t) => {
  const app = await build(t)
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
  const app = await build(t)
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
  const app = await build(t)
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
  const app = await build(t)
  const calls = { hash: 0, verify: 0 }
  const { hash, verify } = app.passwords
  app.passwords.hash = async (password) => { calls.hash++; return hash(password) }
  app.passwords.verify = async (password, stored) => { calls.verify++; return verify(password, stored) }
  t.teardown(() => { Object.assign(app.passwords, { hash, verify }) })

  const huge = 'p'.repeat(10 * 1024)
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

t.test('an overloaded event loop sheds load with 503 + Retry-After; /health stays up', async (t) => {
  const app = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '20' })
  const user = await registerUser(app)
  let shed
  // Block the loop across under-pressure's sampling until it reports the lag.
  for (let attempt = 0; attempt < 20 && shed === undefined; attempt++) {
    const until = Date.now() + 300
    while (Date.now() < until) { /* busy: the event loop cannot turn */ }
    await new Promise((resolve) => setTimeout(resolve, 5))
    const res = await app.inject({ method: 'GET', url: '/tasks', headers: user.auth })
    if (res.statusCode === 503) shed = { res, health: await app.inject({ method: 'GET', url: '/health' }) }
  }
  t.ok(shed, 'a request was shed')
  t.same(json(shed!.res), { success: false, error: 'Service unavailable', code: 'OVERLOADED' })
  t.equal(shed!.res.headers['retry-after'], '5')
  t.equal(shed!.res.headers['x-content-type-options'], 'nosniff', 'a plugin\'s own 503 carries the security headers')
  t.match(shed!.res.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'and the request id')
  t.equal(shed!.health.statusCode, 200, 'liveness is not load-shed')
})

t.test('the installed fast-jwt (under @fastify/jwt) is at least 6.3.1', async (t) => {
  const { readFile } = await import('node:fs/promises')
  const lock = JSON.parse(await readFile(new URL('../package-lock.json', import.meta.url), 'utf8'))
  const version: string = lock.packages['node_modules/fast-jwt'].version
  const [major, minor, patch] = version.split('.').map(Number) as [number, number, number]
  t.ok(major > 6 || (major === 6 && (minor > 3 || (minor === 3 && patch >= 1))), `fast-jwt ${version}`)
})

t.test('a 1 MiB email of dotted labels is refused at once (the email pattern is linear)', { timeout: 60_000 }, async (t) => {
  const app = await build(t)
  // The earlier pattern backtracked quadratically on this: 50 k characters took 6 s, a
  // megabyte minutes of the event loop, every other request waiting behind it.
  const email = `a@${'a.'.repeat(500_000)} x`
  for (const url of ['/auth/login', '/auth/register']) {
    const res = await app.inject({ method: 'POST', url, remoteAddress: ip(), payload: { email, password: 'correct horse battery' } })
    t.equal(res.statusCode, 400, url)
    t.match(json(res), { success: false, details: ['Invalid email address - email'] })
  }
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200)
})
