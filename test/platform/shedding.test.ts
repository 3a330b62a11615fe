// Load shedding: a full password-hashing pool answers 503 before any other work (sign-in,
// sign-up, password change), and an overloaded event loop sheds everything but /health.
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import t from 'tap'
import serviceApp from '../../app.js'
import { serverOptions } from '../../server-options.js'
import { build, failedLogin as login, json, randomAddress as ip, registerUser, sharedApp, testConfig, uniqueEmail } from '../support/helper.js'

// Shedding needs a hash that lasts: one thread, at the production cost (~300 ms a hash).
const HELD_BY_ONE_HASH = { BCRYPT_WORKERS: '1', BCRYPT_ROUNDS: '12' }
const UNQUEUED = { AUTH_RATE_LIMIT_MAX: '3', ...HELD_BY_ONE_HASH, BCRYPT_QUEUE_MAX: '0' }

t.test('a password change is limited and admitted like sign-in', async (t) => {
  const app = await sharedApp(UNQUEUED)
  const user = await registerUser(app, { password: 'the first password' })
  const address = ip()
  const change = (currentPassword: string, remoteAddress = address) => app.inject({
    method: 'PATCH', url: '/account/profile', headers: user.auth, remoteAddress, payload: { currentPassword, newPassword: 'a new password' }
  })
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await change(`guess ${i}`)).statusCode)
  t.same(statuses, [400, 400, 400, 429], 'a stolen token guesses the current password no faster than sign-in allows')
  t.same(json(await change('guess 5')), { success: false, error: 'Too many requests', code: 'RATE_LIMITED' })

  // Another account (this one is locked by the guesses above), with the hashing thread busy.
  const other = await registerUser(app, { password: 'the first password' })
  const hashing = app.passwords.verify('occupies the only thread', undefined)
  const shed = await app.inject({
    method: 'PATCH', url: '/account/profile', headers: other.auth, remoteAddress: ip(), payload: { currentPassword: 'the first password', newPassword: 'a new password' }
  })
  t.equal(shed.statusCode, 503, 'a full hashing pool sheds the change before it queues')
  t.same(json(shed), { success: false, error: 'Service unavailable', code: 'OVERLOADED' })
  await hashing
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: other.auth })).statusCode, 200, 'nothing changed: the token still works')
})

t.test('a full password-hashing queue answers 503 with Retry-After at once, before any hash', async (t) => {
  // One hash at a time and one waiting: of six concurrent sign-ins four are shed.
  const app = await sharedApp({ ...HELD_BY_ONE_HASH, BCRYPT_QUEUE_MAX: '1' })
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
  const unqueued = await sharedApp(UNQUEUED)
  const statuses = (await Promise.all(Array.from({ length: 3 }, () => login(unqueued, uniqueEmail(), ip())))).map((res) => res.statusCode)
  t.same(statuses.sort(), [401, 503, 503], 'BCRYPT_QUEUE_MAX=0 sheds too (not a 500)')
})

t.test('a shed sign-in or sign-up costs no database query', async (t) => {
  // An app of its own: after the race above, piscina (maxQueue 0) still runs one refused
  // task, which holds the only thread for a hash's time on PostgreSQL's timing.
  const app = await build(t, UNQUEUED)
  const known = await registerUser(app)
  const stored = await app.db.selectFrom('users').select('password').where('id', '=', known.id).executeTakeFirstOrThrow()
  t.match(stored.password, /^\$2[aby]\$12\$[./A-Za-z0-9]{53}$/, 'BCRYPT_ROUNDS=12 (the default) stores a cost-12 hash')
  // Count what the auth routes ask of the users table from here on (the email sender,
  // delivering the welcome meanwhile, reads tables of its own).
  const tables: string[] = []
  const selectFrom = app.db.selectFrom.bind(app.db)
  Object.assign(app.db, { selectFrom: (table: any) => { if (String(table) === 'users') tables.push(String(table)); return selectFrom(table) } })
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

t.test('an overloaded event loop sheds load with 503 + Retry-After; /health stays up', async (t) => {
  const app = await sharedApp({ MAX_EVENT_LOOP_DELAY_MS: '20' })
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

t.test('the lag of the start-up is not load: a server just started is not shed for it', async (t) => {
  // under-pressure keeps the mean lag of each 1 s window, in 10 ms ticks: one 1.2 s stall
  // among up to 100 quiet ticks averages at least ~11 ms, over a 1 ms limit wherever in the
  // window the stall falls (with a 20 ms limit, a stall late in a window went unseen in CI).
  const config = await testConfig(t, { MAX_EVENT_LOOP_DELAY_MS: '1' })
  const app = Fastify(serverOptions(config))
  app.register(fp(serviceApp), { config })
  // A start-up that holds the loop past under-pressure's first sample (a busy machine,
  // a cold module cache), after the service's plugins are registered: six stalls of 200 ms,
  // the loop turning between them. (One stall of 1.2 s could go unseen: when under-pressure's
  // sample timer runs before the delay monitor's after it, the sample resets the monitor, and
  // the stall's one long delay was never recorded. It failed twice in CI that way.)
  app.register(async () => {
    for (let stall = 0; stall < 6; stall++) {
      const until = Date.now() + 200
      while (Date.now() < until) { /* busy: the event loop cannot turn */ }
      await new Promise((resolve) => setTimeout(resolve, 1))
    }
  })
  t.teardown(() => app.close())
  await app.ready()
  // The sample holding the stalls may be taken up to a second after ready: wait for it, well
  // within the 2 s after ready in which a server just started does not shed.
  const since = Date.now()
  while (app.memoryUsage().eventLoopDelay <= 1 && Date.now() - since < 1500) {
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  t.equal(app.memoryUsage().eventLoopDelay > 1, true, 'the sample taken at start-up saw the lag')
  const res = await app.inject({ method: 'GET', url: '/ready' })
  t.equal(res.statusCode, 200, 'the first request after start is served')
})

t.test('at a cost other than 12, a dummy hash shed once is made again by the next unknown email', async (t) => {
  const app = await build(t, { BCRYPT_WORKERS: '1', BCRYPT_ROUNDS: '10', BCRYPT_QUEUE_MAX: '1' })
  const hashing = [app.passwords.hash('occupies the only thread'), app.passwords.hash('and the one queue place')]
  await t.rejects(app.passwords.verify('someone', undefined), { code: 'OVERLOADED' }, 'shed while the pool is full')
  await Promise.all(hashing)
  t.equal(await app.passwords.verify('someone', undefined), false, 'the next attempt hashes the dummy and answers')
  t.equal((await login(app, uniqueEmail(), ip())).statusCode, 401, 'an unknown email signs in to a 401, not a 503')
})
