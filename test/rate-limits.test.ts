// Rate limits: per client address, failures per email without a lock-out, the global
// ceiling counted before authentication, and X-Forwarded-For only behind a trusted proxy.
// (Shared through Redis by several instances: test/integration/scale-out.test.ts.)
import t from 'tap'
import { failedLogin as login, json, randomAddress as ip, registerUser, sharedApp, uniqueEmail } from './helper.js'

t.test('sign-in is limited per client address: 429 envelope with Retry-After', async (t) => {
  const app = await sharedApp({ AUTH_RATE_LIMIT_MAX: '3' })
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
  const app = await sharedApp({ AUTH_RATE_LIMIT_MAX: '3' })
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

t.test('the global limit counts requests before authentication: a 429 costs no token query', async (t) => {
  const app = await sharedApp({ RATE_LIMIT_MAX: '5' })
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
  const app = await sharedApp({ RATE_LIMIT_MAX: '5' })
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
  const untrusting = await sharedApp({ AUTH_RATE_LIMIT_MAX: '2' })
  const proxy = ip()
  const spoofed = []
  for (let i = 0; i < 3; i++) spoofed.push((await login(untrusting, uniqueEmail(), proxy, { 'x-forwarded-for': ip() })).statusCode)
  t.same(spoofed, [401, 401, 429], 'a client cannot dodge the limit by inventing addresses')

  const trusting = await sharedApp({ AUTH_RATE_LIMIT_MAX: '2', TRUST_PROXY: 'true' })
  const behindProxy = []
  for (let i = 0; i < 3; i++) behindProxy.push((await login(trusting, uniqueEmail(), proxy, { 'x-forwarded-for': ip() })).statusCode)
  t.same(behindProxy, [401, 401, 401], 'behind a trusted proxy each client has its own bucket')
})

t.test('"forgot password" requests for an email never hold back its owner\'s sign-in', async (t) => {
  const app = await sharedApp({ AUTH_RATE_LIMIT_MAX: '3' })
  const owner = await registerUser(app, { email: uniqueEmail('forgetful'), password: 'the owner knows this' })
  for (let i = 0; i < 3; i++) {
    const forgot = await app.inject({ method: 'POST', url: '/auth/password/forgot', remoteAddress: ip(), payload: { email: owner.email } })
    t.equal(forgot.statusCode, 202)
  }
  const home = ip()
  t.equal((await login(app, owner.email, home)).statusCode, 401, 'the owner mistypes once at home')
  const signIn = await app.inject({ method: 'POST', url: '/auth/login', remoteAddress: home, payload: { email: owner.email, password: 'the owner knows this' } })
  t.equal(signIn.statusCode, 200, 'and signs in: the forgot requests did not count as failed sign-ins')
})
