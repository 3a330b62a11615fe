// Cross-cutting HTTP behaviour: envelopes for framework errors, request ids, health and readiness.
import t from 'tap'
import { build, json, registerUser, sharedApp } from '../support/helper.js'

const app = await sharedApp()
const user = await registerUser(app)

t.test('GET /health answers plain OK without auth', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/health' })
  t.equal(res.statusCode, 200)
  t.equal(res.body, 'OK')
  t.match(res.headers['content-type'], /^text\/plain/)
})

t.test('GET /ready pings the database', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/ready' })
  t.equal(res.statusCode, 200)
  t.equal(res.body, 'OK')
})

t.test('unknown route: 404 envelope', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/nope' })
  t.equal(res.statusCode, 404)
  t.same(json(res), { success: false, error: 'Not found', code: 'NOT_FOUND' })
})

t.test('malformed JSON: 400 Invalid JSON body', async (t) => {
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'content-type': 'application/json' }, payload: '{"title":' })
  t.equal(res.statusCode, 400)
  t.same(json(res), { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' })
})

t.test('empty JSON body: 400 Invalid JSON body', async (t) => {
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'content-type': 'application/json' }, payload: '' })
  t.equal(res.statusCode, 400)
  t.same(json(res), { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' })
})

t.test('a route that takes no body: an empty JSON body (as browser fetch wrappers send) is no body', async (t) => {
  const jsonHeaders = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' })
  const task = json(await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: 'to delete' } })).data
  for (const [label, headers] of [['content-length: 0', { 'content-length': '0' }], ['whitespace only', { 'content-length': '2' }]] as const) {
    const payload = label === 'whitespace only' ? '\r\n' : ''
    const me = await registerUser(app)
    const out = await app.inject({ method: 'POST', url: '/auth/logout', headers: { ...jsonHeaders(me.token), ...headers }, payload })
    t.equal(out.statusCode, 200, `logout, ${label}`)
    t.same(json(out), { success: true, data: null })
    t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: me.auth })).statusCode, 401, 'and the token is revoked')
  }
  const deleted = await app.inject({ method: 'DELETE', url: `/tasks/${task.id}`, headers: { ...jsonHeaders(user.token), 'content-length': '0' }, payload: '' })
  t.equal(deleted.statusCode, 200)
  t.same(json(deleted), { success: true, data: { id: task.id, deleted: true } })

  for (const empty of ['{}', 'null', ' { } ']) {
    const other = await registerUser(app)
    const res = await app.inject({ method: 'POST', url: '/auth/logout', headers: jsonHeaders(other.token), payload: empty })
    t.equal(res.statusCode, 200, `${JSON.stringify(empty)} says nothing either`)
  }
  const me = await registerUser(app)
  for (const [payload, code, details] of [
    ['{"everywhere":true}', 'VALIDATION_FAILED', ['This operation takes no body - body']],
    ['[]', 'VALIDATION_FAILED', ['This operation takes no body - body']],
    ['"text"', 'VALIDATION_FAILED', ['This operation takes no body - body']],
    ['{"a":', 'INVALID_JSON', undefined]
  ] as const) {
    const res = await app.inject({ method: 'POST', url: '/auth/logout', headers: jsonHeaders(me.token), payload })
    t.equal(res.statusCode, 400, `a body that says something is refused, not ignored: ${payload}`)
    t.same(json(res), { success: false, error: code === 'INVALID_JSON' ? 'Invalid JSON body' : 'Validation failed', code, ...(details && { details }) })
  }
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: me.auth })).statusCode, 200, 'the refused sign-outs did nothing')

  const unknown = await app.inject({ method: 'POST', url: '/no/such/route', headers: { 'content-type': 'application/json' }, payload: '{"a":1}' })
  t.equal(unknown.statusCode, 404, 'an unknown route is 404 whatever its body')
  t.same(json(unknown), { success: false, error: 'Not found', code: 'NOT_FOUND' })
})

t.test('text/plain on a JSON route: 415', async (t) => {
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'content-type': 'text/plain' }, payload: 'hello' })
  t.equal(res.statusCode, 415)
  t.same(json(res), { success: false, error: 'Unsupported media type', code: 'UNSUPPORTED_MEDIA_TYPE' })
})

t.test('body over 1 MiB: 413', async (t) => {
  const res = await app.inject({
    method: 'POST',
    url: '/tasks',
    headers: { ...user.auth, 'content-type': 'application/json' },
    payload: JSON.stringify({ title: 'big', description: 'x'.repeat(1024 * 1024) })
  })
  t.equal(res.statusCode, 413)
  t.same(json(res), { success: false, error: 'Payload too large', code: 'PAYLOAD_TOO_LARGE' })
})

t.test('every response carries x-request-id; a sane incoming one is echoed', async (t) => {
  const generated = await app.inject({ method: 'GET', url: '/nope' })
  t.match(generated.headers['x-request-id'], /^[0-9a-f-]{36}$/)
  const echoed = await app.inject({ method: 'GET', url: '/health', headers: { 'x-request-id': 'lb-abc.123' } })
  t.equal(echoed.headers['x-request-id'], 'lb-abc.123')
  const hostile = await app.inject({ method: 'GET', url: '/health', headers: { 'x-request-id': 'a b\u00e9<script>' } })
  t.not(hostile.headers['x-request-id'], 'a b\u00e9<script>')
  t.match(hostile.headers['x-request-id'], /^[0-9a-f-]{36}$/)
  const unauthorized = await app.inject({ method: 'GET', url: '/tasks' })
  t.equal(unauthorized.statusCode, 401)
  t.ok(unauthorized.headers['x-request-id'])
})

t.test('CORS allows APP_URL with credentials, never *', async (t) => {
  const allowed = await app.inject({ method: 'OPTIONS', url: '/tasks', headers: { origin: 'http://localhost:3000', 'access-control-request-method': 'POST' } })
  t.equal(allowed.statusCode, 204)
  t.equal(allowed.headers['access-control-allow-origin'], 'http://localhost:3000')
  t.equal(allowed.headers['access-control-allow-credentials'], 'true')
  t.equal(allowed.headers['x-content-type-options'], 'nosniff', 'a preflight carries the security headers too')
  t.ok(allowed.headers['x-request-id'])
  const foreign = await app.inject({ method: 'OPTIONS', url: '/tasks', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } })
  t.equal(foreign.statusCode, 404, 'a preflight from another site is refused')
  t.equal(foreign.headers['access-control-allow-origin'], undefined)
  t.equal(foreign.headers['access-control-allow-credentials'], undefined)
  const read = await app.inject({ method: 'GET', url: '/tasks', headers: { ...user.auth, origin: 'http://localhost:3000' } })
  t.equal(read.headers['access-control-allow-origin'], 'http://localhost:3000')
  t.equal(read.headers['access-control-expose-headers'], 'X-Total-Count, X-Request-Id', 'the web client can read the total and the request id')
  // Servers, load balancers and the payment provider send no Origin: no CORS headers for them.
  const noOrigin = await app.inject({ method: 'GET', url: '/health' })
  t.equal(noOrigin.headers.vary, 'Origin')
  t.notOk(Object.keys(noOrigin.headers).some((name) => name.startsWith('access-control-')))
})

t.test('JSON bodies are validated as sent (no coercion); query strings are coerced', async (t) => {
  for (const payload of [{ taskReminders: null }, { taskReminders: 'true' }, { weeklyDigest: 1 }]) {
    const res = await app.inject({ method: 'PATCH', url: '/preferences', headers: user.auth, payload })
    t.equal(res.statusCode, 400, JSON.stringify(payload))
    t.equal(json(res).error, 'Validation failed')
  }
  const stored = await app.db.selectFrom('user_preferences').select(['task_reminders', 'weekly_digest']).where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.same(stored, { task_reminders: true, weekly_digest: false })

  const numberTitle = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: 42 } })
  t.equal(numberTitle.statusCode, 400)
  t.same(json(numberTitle).details, ['Must be a string - title'])

  const bad = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: 'x', dueDate: 'next tuesday' } })
  t.same(json(bad).details, ['Must be an ISO-8601 date-time - dueDate'])

  const coerced = await app.inject({ method: 'GET', url: '/tasks?limit=5&offset=0', headers: user.auth })
  t.equal(coerced.statusCode, 200)
})

t.test('unknown query parameters are refused on every route but the probes, also those that take none', async (t) => {
  const cases: Array<[string, string, Record<string, string>]> = [
    ['GET', '/auth/me?expand=all', user.auth],
    ['GET', '/preferences?fields=plan', user.auth],
    ['GET', '/account/profile?x=1', user.auth],
    ['GET', '/tasks/1?include=user', user.auth]
  ]
  for (const [method, url, headers] of cases) {
    const res = await app.inject({ method: method as 'GET', url, headers })
    t.equal(res.statusCode, 400, url)
    t.same(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: [`Unknown field - ${url.split('?')[1]!.split('=')[0]}`] })
  }
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: user.auth })).statusCode, 200, 'without them, as before')
})

t.test('the probes answer whatever their query string (a prober\'s cache-buster)', async (t) => {
  for (const url of ['/health?x=1', '/health?t=1732550400&verbose', '/ready?x=1', '/ready?a=1&a=2']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 200, url)
    t.equal(res.body, 'OK', url)
  }
})

t.test('a request that reaches the database after shutdown has closed it gets 503, not 500', async (t) => {
  const closing = await build(t)
  const { auth } = await registerUser(closing)
  // As when the server closes with requests still queued for the database.
  await closing.db.destroy()
  const res = await closing.inject({ method: 'GET', url: '/tasks', headers: auth })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { success: false, code: 'SERVICE_UNAVAILABLE' })
})
