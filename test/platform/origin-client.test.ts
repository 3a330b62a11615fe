// A test that is the origin web client (spec/client-compat.md): it replays, flow by flow as
// a new user meets them, the exact requests that browser dashboard sends (every request
// carries `content-type: application/json`, also when it sends no body; bodies byte for
// byte as the page shows them) and asserts only what that client reads back.
import { createHmac, randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import t, { type Test } from 'tap'
import { build, json, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { checkoutSessionCompleted, signedDelivery } from '../support/stripe-events.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'

const APP_URL = 'http://localhost:3000' // APP_URL's default
const API_URL = 'http://localhost:3002' // API_URL's default
const WEBHOOK_SECRET = 'whsec_test_origin_client'
const PRICE = 'price_pro_monthly'
const SEVEN_DAYS = 7 * 24 * 60 * 60
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// The settings page's save, verbatim (note the mixed `true`).
const SETTINGS_BODY = '{"defaultTaskStatus":"in-progress","emailNotifications":"enabled","taskReminders":true,"weeklyDigest":"disabled","theme":"system","language":"en","pushNotifications":"disabled"}'

const stripe = await startStripeStandIn()
t.teardown(() => stripe.close())
const app = await build(t, {
  PAYMENT_SECRET_KEY: 'sk_test_origin_client',
  PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  PAYMENT_PRICE_IDS: PRICE,
  PAYMENT_API_URL: stripe.url,
  PAYMENT_MAX_RETRIES: '0',
  PAYMENT_TIMEOUT_MS: '2000'
})

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'

/**
 * One request as the client's fetch wrapper sends it: the JSON content type always, the
 * bearer token when signed in, and the body string as given. Without a body, fetch sends
 * the header anyway with an empty body; light-my-request sends no content-length for
 * `payload: ''`, so it is set to 0 here, as Chromium does for a body-less POST or PUT.
 */
function send (method: Method, url: string, opts: { token?: string, body?: string } = {}) {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`
  if (method === 'GET') return app.inject({ method, url, headers })
  if (opts.body === undefined) headers['content-length'] = '0'
  return app.inject({ method, url, headers, payload: opts.body ?? '' })
}

const body = (value: unknown) => JSON.stringify(value)

/** The task create dialog's body: every field present, completedAt always null. */
const createDialog = (fields: { title: string, description: string, status?: string, dueDate?: string | null }) =>
  body({ title: fields.title, description: fields.description, status: fields.status ?? 'todo', dueDate: fields.dueDate ?? null, completedAt: null })

/**
 * A failure as the client reads it: `{success:false, error, code, details?}`. `details`:
 * an exact list, a pattern its one line must match, 'some' (a non-empty list) or
 * 'optional' (absent, or a list); left out, the body has no details.
 */
function assertFailure (t: Test, res: LightMyRequestResponse, status: number, code: string, error?: string,
  details?: string[] | RegExp | 'some' | 'optional') {
  t.equal(res.statusCode, status, `status ${status} (${code})`)
  const got = json(res)
  t.equal(got.success, false)
  t.equal(got.code, code, `code ${code}; body ${res.body}`)
  if (error === undefined) t.type(got.error, 'string', 'error is text for people')
  else t.equal(got.error, error)
  const keys = Object.keys(got).sort()
  if (details === undefined) {
    t.same(keys, ['code', 'error', 'success'], 'no other keys')
  } else if (details === 'optional') {
    t.ok(keys.every((k) => ['code', 'details', 'error', 'success'].includes(k)), `only envelope keys: ${keys.join(', ')}`)
    if ('details' in got) t.ok(Array.isArray(got.details), 'details is a list')
  } else {
    t.same(keys, ['code', 'details', 'error', 'success'])
    t.ok(Array.isArray(got.details) && got.details.length > 0, 'details is a non-empty list')
    if (Array.isArray(details)) t.same(got.details, details)
    if (details instanceof RegExp) {
      t.equal(got.details?.length, 1, `one detail: ${JSON.stringify(got.details)}`)
      t.match(got.details?.[0], details)
    }
  }
}

/** The dashboard's numbers beside `data` in GET /tasks. */
function assertCounts (t: Test, res: LightMyRequestResponse, counts: { total: number, todo: number, inProgress: number, completed: number }) {
  t.equal(res.statusCode, 200)
  const got = json(res)
  t.same({ total: got.total, todo: got.todo, inProgress: got.inProgress, completed: got.completed }, counts, 'total, todo, inProgress, completed')
  t.equal(res.headers['x-total-count'], String(counts.total), 'total is the X-Total-Count number')
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
const nowSeconds = () => Math.floor(Date.now() / 1000)

/** An HS256 JWT signed here with the test secret: exactly the given claims, nothing added. */
function signToken (claims: Record<string, unknown>): string {
  const input = `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url(claims)}`
  return `${input}.${createHmac('sha256', TEST_SECRET).update(input).digest('base64url')}`
}

/** The documented claims and no other: sub, email, iss, aud, iat, exp (+7 days), jti. */
const documentedToken = (user: { id: string, email: string }) => {
  const iat = nowSeconds()
  return signToken({ sub: user.id, email: user.email, iss: APP_URL, aud: API_URL, iat, exp: iat + SEVEN_DAYS, jti: randomUUID() })
}

// Token checks compare whole seconds (iat); waiting for the next second keeps "before" and
// "after" a password change unambiguous.
const nextSecond = () => new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 50))

function deliver (event: unknown) {
  const { body, headers } = signedDelivery(event, WEBHOOK_SECRET)
  return app.inject({ method: 'POST', url: '/webhooks/payment', headers, payload: body })
}

/** Signs up through the register form; returns the id and the token it answers. */
async function signUp (label: string, password = 'correct horse battery') {
  const email = uniqueEmail(label)
  const res = await send('POST', '/auth/register', { body: body({ name: label, email, password }) })
  if (res.statusCode !== 201) throw new Error(`register failed: ${res.statusCode} ${res.body}`)
  return { id: json(res).user.id as string, email, password, token: json(res).token as string }
}

// The user walking through the app, flow after flow. The token is the one the client keeps
// in local storage from its last sign-in.
const ada = { name: 'Ada Lovelace', email: uniqueEmail('ada'), password: 'correct horse battery', id: '', token: '' }

t.test('sign up', async (t) => {
  const res = await send('POST', '/auth/register', { body: body({ name: ada.name, email: ada.email, password: ada.password }) })
  t.equal(res.statusCode, 201)
  t.match(json(res), { success: true, token: String, user: { id: UUID, email: ada.email, name: ada.name } })
  ada.id = json(res).user.id
  ada.token = json(res).token

  // The client allows 6 characters; we keep 8, and the 400 says so in details.
  const short = await send('POST', '/auth/register', { body: body({ name: 'Short', email: uniqueEmail('short'), password: 'abc123' }) })
  assertFailure(t, short, 400, 'VALIDATION_FAILED', 'Validation failed', /at least 8 characters - password$/)
})

t.test('sign in', async (t) => {
  const res = await send('POST', '/auth/login', { body: body({ email: ada.email, password: ada.password }) })
  t.equal(res.statusCode, 200)
  t.match(json(res), { success: true, token: String, user: { id: ada.id, email: ada.email, name: ada.name } })
  ada.token = json(res).token
  const me = await send('GET', '/auth/me', { token: ada.token })
  t.equal(me.statusCode, 200)
  t.match(json(me), { success: true, data: { id: ada.id, email: ada.email } })
})

t.test('wrong password, unknown email, a malformed sign-in form', async (t) => {
  const wrong = await send('POST', '/auth/login', { body: body({ email: ada.email, password: 'not my password' }) })
  assertFailure(t, wrong, 401, 'INVALID_CREDENTIALS', 'Invalid email or password')
  const unknown = await send('POST', '/auth/login', { body: body({ email: uniqueEmail('nobody'), password: 'not my password' }) })
  assertFailure(t, unknown, 401, 'INVALID_CREDENTIALS', 'Invalid email or password')
  // Sign-in form validation has its own text and code (not VALIDATION_FAILED).
  const malformed = await send('POST', '/auth/login', { body: body({ email: 'ada', password: 'secret1' }) })
  assertFailure(t, malformed, 400, 'INVALID_INPUT', 'Invalid input', 'optional')
})

t.test('sign up again with a registered email', async (t) => {
  const res = await send('POST', '/auth/register', { body: body({ name: 'Ada again', email: ada.email, password: 'another good password' }) })
  assertFailure(t, res, 409, 'EMAIL_TAKEN', 'Email already registered')
})

t.test('sign out: empty JSON body, then the token is refused', async (t) => {
  // A second session, so the journey keeps its own token.
  const signedIn = await send('POST', '/auth/login', { body: body({ email: ada.email, password: ada.password }) })
  t.equal(signedIn.statusCode, 200)
  const token = json(signedIn).token as string
  const res = await send('POST', '/auth/logout', { token })
  t.equal(res.statusCode, 200, `logout answered ${res.body}`)
  t.same(json(res), { success: true, data: null })
  const after = await send('GET', '/auth/me', { token })
  assertFailure(t, after, 401, 'UNAUTHORIZED', 'Unauthorized')
  const none = await send('GET', '/auth/me')
  assertFailure(t, none, 401, 'UNAUTHORIZED', 'Unauthorized')
})

t.test('dashboard: the cards of a new user', async (t) => {
  const res = await send('GET', '/tasks', { token: ada.token })
  assertCounts(t, res, { total: 0, todo: 0, inProgress: 0, completed: 0 })
  t.same(json(res).data, [])
  t.equal(json(res).success, true)
})

// Tasks the flows below share: report is created todo, venue in progress.
const tasks = { report: 0, venue: 0 }

t.test('create task from the dialog', async (t) => {
  const res = await send('POST', '/tasks', { token: ada.token, body: createDialog({ title: 'Write the quarterly report', description: 'Numbers for Q4' }) })
  t.equal(res.statusCode, 201, `create answered ${res.body}`)
  t.same(Object.keys(json(res)).sort(), ['data', 'success'])
  t.match(json(res).data, {
    id: Number,
    title: 'Write the quarterly report',
    description: 'Numbers for Q4',
    status: 'todo',
    dueDate: null,
    createdAt: ISO,
    updatedAt: ISO
  })
  t.equal(json(res).data.completedAt, null, 'the server keeps completedAt null for a todo task')
  tasks.report = json(res).data.id

  const venue = await send('POST', '/tasks', { token: ada.token, body: createDialog({ title: 'Book the venue', description: 'Forty people', status: 'in-progress', dueDate: '2026-12-01T09:00:00.000Z' }) })
  t.equal(venue.statusCode, 201, `create answered ${venue.body}`)
  t.match(json(venue).data, { title: 'Book the venue', status: 'in-progress', dueDate: '2026-12-01T09:00:00.000Z' })
  t.equal(json(venue).data.completedAt, null)
  tasks.venue = json(venue).data.id

  // The server sets completedAt; a client that sends a time is told so, and nothing is stored.
  const withTime = await send('POST', '/tasks', { token: ada.token, body: body({ title: 'Backdated', description: '', status: 'completed', dueDate: null, completedAt: '2026-01-01T00:00:00.000Z' }) })
  assertFailure(t, withTime, 400, 'VALIDATION_FAILED', 'Validation failed', / - completedAt$/)

  // Needs a body: an empty one is still malformed JSON.
  const empty = await send('POST', '/tasks', { token: ada.token })
  assertFailure(t, empty, 400, 'INVALID_JSON', 'Invalid JSON body')

  const list = await send('GET', '/tasks', { token: ada.token })
  assertCounts(t, list, { total: 2, todo: 1, inProgress: 1, completed: 0 })
  t.same(json(list).data.map((task: { id: number }) => task.id).sort((a: number, b: number) => a - b),
    [tasks.report, tasks.venue].sort((a, b) => a - b), 'exactly the two created tasks')
})

t.test('edit a task from the dialog', async (t) => {
  const res = await send('PATCH', `/tasks/${tasks.report}`, {
    token: ada.token,
    body: body({ title: 'Write the Q4 report', description: 'Numbers and outlook', status: 'todo', dueDate: '2026-12-15T17:00:00.000Z', completedAt: null })
  })
  t.equal(res.statusCode, 200, `edit answered ${res.body}`)
  t.match(json(res), { success: true, data: { id: tasks.report, title: 'Write the Q4 report', description: 'Numbers and outlook', status: 'todo', dueDate: '2026-12-15T17:00:00.000Z' } })
  t.equal(json(res).data.completedAt, null)

  const withTime = await send('PATCH', `/tasks/${tasks.report}`, { token: ada.token, body: body({ completedAt: '2026-01-01T00:00:00.000Z' }) })
  assertFailure(t, withTime, 400, 'VALIDATION_FAILED', 'Validation failed', / - completedAt$/)
})

t.test('complete a task', async (t) => {
  const before = Date.now() - 1000
  const res = await send('PATCH', `/tasks/${tasks.report}`, { token: ada.token, body: body({ status: 'completed' }) })
  t.equal(res.statusCode, 200)
  t.match(json(res).data, { id: tasks.report, status: 'completed', completedAt: ISO })
  t.ok(Date.parse(json(res).data.completedAt) >= before, 'completedAt is now')
})

t.test('task list: counts, filter and paging', async (t) => {
  const all = await send('GET', '/tasks', { token: ada.token })
  assertCounts(t, all, { total: 2, todo: 0, inProgress: 1, completed: 1 })
  t.equal(json(all).data.length, 2)

  // The filter narrows data and total; the status cards still count every task.
  const completed = await send('GET', '/tasks?status=completed', { token: ada.token })
  assertCounts(t, completed, { total: 1, todo: 0, inProgress: 1, completed: 1 })
  t.same(json(completed).data.map((task: { id: number }) => task.id), [tasks.report])

  // Paging shrinks the page, not the totals.
  const page = await send('GET', '/tasks?limit=1', { token: ada.token })
  assertCounts(t, page, { total: 2, todo: 0, inProgress: 1, completed: 1 })
  t.equal(json(page).data.length, 1)

  const most = await send('GET', '/tasks?limit=1000', { token: ada.token })
  t.equal(most.statusCode, 200, 'limit 1000 is allowed')
  t.equal(json(most).data?.length, 2)
  const tooMany = await send('GET', '/tasks?limit=1001', { token: ada.token })
  assertFailure(t, tooMany, 400, 'VALIDATION_FAILED', 'Validation failed', / - limit$/)
})

t.test('delete a task: empty JSON body', async (t) => {
  const res = await send('DELETE', `/tasks/${tasks.venue}`, { token: ada.token })
  t.equal(res.statusCode, 200, `delete answered ${res.body}`)
  t.same(json(res), { success: true, data: { id: tasks.venue, deleted: true } })
  assertFailure(t, await send('GET', `/tasks/${tasks.venue}`, { token: ada.token }), 404, 'TASK_NOT_FOUND', 'Task not found')
  assertFailure(t, await send('DELETE', `/tasks/${tasks.venue}`, { token: ada.token }), 404, 'TASK_NOT_FOUND', 'Task not found')
  assertCounts(t, await send('GET', '/tasks', { token: ada.token }), { total: 1, todo: 0, inProgress: 0, completed: 1 })

  // Chromium sends no content-length at all on a body-less DELETE: still no body.
  const bare = await app.inject({
    method: 'DELETE',
    url: `/tasks/${tasks.report}`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ada.token}` }
  })
  t.equal(bare.statusCode, 200, `delete without content-length answered ${bare.body}`)
  t.same(json(bare), { success: true, data: { id: tasks.report, deleted: true } })
})

t.test('a user with 60 tasks sees every one without paging', async (t) => {
  const busy = await signUp('busy')
  // Created through the API in parallel batches, as quickly as the client could.
  for (let batch = 0; batch < 3; batch++) {
    const created = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      send('POST', '/tasks', { token: busy.token, body: createDialog({ title: `Task ${batch * 20 + i + 1}`, description: 'bulk' }) })))
    t.same(created.map((res) => res.statusCode), Array(20).fill(201), `batch ${batch + 1} created`)
  }
  const res = await send('GET', '/tasks', { token: busy.token })
  assertCounts(t, res, { total: 60, todo: 60, inProgress: 0, completed: 0 })
  t.equal(json(res).data?.length, 60, 'more than the old default page of 50')
  t.equal(new Set(json(res).data?.map((task: { id: number }) => task.id)).size, 60, '60 distinct tasks')
})

t.test('settings: load the defaults, save the settings page, load again', async (t) => {
  const loaded = await send('GET', '/preferences', { token: ada.token })
  t.equal(loaded.statusCode, 200)
  const defaults = json(loaded).data
  t.match(defaults, {
    defaultStatus: 'todo',
    defaultTaskStatus: 'todo',
    emailNotifications: 'enabled',
    taskReminders: 'enabled',
    weeklyDigest: 'disabled',
    pushNotifications: 'disabled',
    theme: 'system',
    language: 'en',
    plan: 'free'
  })
  // Strict: present and null, not merely missing.
  for (const field of ['timezone', 'paymentCustomerId', 'paymentSubscriptionId', 'paymentSubscriptionStatus', 'paymentPriceId', 'paymentCurrentPeriodEnd']) {
    t.equal(defaults[field], null, `${field} is null`)
  }

  const saved = await send('PUT', '/preferences', { token: ada.token, body: SETTINGS_BODY })
  t.equal(saved.statusCode, 200, `save answered ${saved.body}`)
  t.match(json(saved).data, {
    defaultTaskStatus: 'in-progress',
    defaultStatus: 'in-progress',
    emailNotifications: 'enabled',
    taskReminders: 'enabled',
    weeklyDigest: 'disabled',
    pushNotifications: 'disabled',
    theme: 'system',
    language: 'en',
    plan: 'free'
  })
  const reloaded = await send('GET', '/preferences', { token: ada.token })
  t.same(json(reloaded).data, json(saved).data, 'a reload shows what was saved')
})

t.test('settings: toggles as booleans or strings, the timezone, refused fields', async (t) => {
  const booleans = await send('PUT', '/preferences', { token: ada.token, body: body({ emailNotifications: false, weeklyDigest: true, pushNotifications: true }) })
  t.equal(booleans.statusCode, 200, `booleans answered ${booleans.body}`)
  t.match(json(booleans).data, { emailNotifications: 'disabled', weeklyDigest: 'enabled', pushNotifications: 'enabled', taskReminders: 'enabled' })
  const strings = await send('PUT', '/preferences', { token: ada.token, body: body({ emailNotifications: 'enabled', taskReminders: 'disabled' }) })
  t.equal(strings.statusCode, 200)
  t.match(json(strings).data, { emailNotifications: 'enabled', taskReminders: 'disabled', weeklyDigest: 'enabled' })

  const paris = await send('PUT', '/preferences', { token: ada.token, body: body({ timezone: 'Europe/Paris' }) })
  t.equal(paris.statusCode, 200)
  t.equal(json(paris).data?.timezone, 'Europe/Paris')
  const mars = await send('PUT', '/preferences', { token: ada.token, body: body({ timezone: 'Mars/Olympus' }) })
  assertFailure(t, mars, 400, 'VALIDATION_FAILED', 'Validation failed', / - timezone$/)

  // Either name is accepted; both at once must agree.
  const agree = await send('PUT', '/preferences', { token: ada.token, body: body({ defaultStatus: 'completed', defaultTaskStatus: 'completed' }) })
  t.equal(agree.statusCode, 200)
  t.match(json(agree).data, { defaultStatus: 'completed', defaultTaskStatus: 'completed' })
  const oldName = await send('PUT', '/preferences', { token: ada.token, body: body({ defaultStatus: 'todo' }) })
  t.match(json(oldName).data, { defaultStatus: 'todo', defaultTaskStatus: 'todo' })
  const disagree = await send('PUT', '/preferences', { token: ada.token, body: body({ defaultStatus: 'todo', defaultTaskStatus: 'in-progress' }) })
  assertFailure(t, disagree, 400, 'VALIDATION_FAILED', 'Validation failed', 'some')

  const plan = await send('PUT', '/preferences', { token: ada.token, body: body({ plan: 'pro' }) })
  assertFailure(t, plan, 400, 'VALIDATION_FAILED', 'Validation failed', ['Unknown field - plan'])
  const customer = await send('PUT', '/preferences', { token: ada.token, body: body({ paymentCustomerId: 'cus_mine' }) })
  assertFailure(t, customer, 400, 'VALIDATION_FAILED', 'Validation failed', ['Unknown field - paymentCustomerId'])

  const after = json(await send('GET', '/preferences', { token: ada.token })).data
  t.match(after, { plan: 'free', timezone: 'Europe/Paris', defaultStatus: 'todo', defaultTaskStatus: 'todo' }, 'refused saves changed nothing')
  t.equal(after.paymentCustomerId, null)
})

t.test('edit the profile name with PUT', async (t) => {
  const res = await send('PUT', '/account/profile', { token: ada.token, body: body({ name: 'Ada King' }) })
  t.equal(res.statusCode, 200, `PUT answered ${res.body}`)
  t.same(Object.keys(json(res)).sort(), ['data', 'success'], 'no token without a password change')
  t.match(json(res), { success: true, data: { id: ada.id, email: ada.email, name: 'Ada King', updatedAt: ISO } })
  const me = await send('GET', '/auth/me', { token: ada.token })
  t.equal(json(me).data?.name, 'Ada King', 'stored')
})

t.test('billing page on the free plan', async (t) => {
  const res = await send('GET', '/subscription', { token: ada.token })
  t.equal(res.statusCode, 200)
  const data = json(res).data
  t.equal(data.plan, 'free')
  t.ok('subscription' in data, 'subscription is present')
  t.equal(data.subscription, null, 'no subscription object on the free plan')
  // Today's flat fields stay.
  t.match(data, { status: null, subscriptionId: null, priceId: null, currentPeriodEnd: null, cancelAtPeriodEnd: false })

  const cancel = await send('DELETE', '/subscription', { token: ada.token })
  assertFailure(t, cancel, 404, 'NO_ACTIVE_SUBSCRIPTION')
})

t.test('manage billing before paying: no provider customer', async (t) => {
  stripe.reset()
  const res = await send('POST', '/billing-portal', { token: ada.token })
  assertFailure(t, res, 404, 'NO_STRIPE_CUSTOMER', 'No billing account')
  t.same(stripe.calls, [], 'the provider was not asked')
})

t.test('upgrade through checkout', async (t) => {
  const sessionCount = () => stripe.checkoutSessions.size
  const newSessions = (before: number) => [...stripe.checkoutSessions.values()].slice(before)

  // The client's upgrade button: the priceId only; payers come back to the billing page.
  let before = sessionCount()
  const res = await send('POST', '/checkout', { token: ada.token, body: body({ priceId: PRICE }) })
  t.equal(res.statusCode, 200, `checkout answered ${res.body}`)
  const created = newSessions(before)
  t.equal(created.length, 1, 'one session at the provider')
  const session = created[0]
  if (session === undefined) return t.fail('no checkout session to complete')
  t.same(json(res), { success: true, data: { url: session.url, sessionId: session.id } })
  t.equal(session.success_url, `${APP_URL}/dashboard/billing?success=true`)
  t.equal(session.cancel_url, `${APP_URL}/dashboard/billing?canceled=true`)

  // Return URLs in the body are used when they are on APP_URL's origin...
  before = sessionCount()
  const successUrl = `${APP_URL}/dashboard/billing?success=true&from=pricing`
  const cancelUrl = `${APP_URL}/pricing?canceled=true`
  const own = await send('POST', '/checkout', { token: ada.token, body: body({ priceId: PRICE, successUrl, cancelUrl }) })
  t.equal(own.statusCode, 200, `checkout with own URLs answered ${own.body}`)
  const ownSessions = newSessions(before)
  t.equal(ownSessions.length, 1)
  t.match(ownSessions[0], { success_url: successUrl, cancel_url: cancelUrl })

  // ...and refused on any other origin: no open redirect through the provider.
  for (const redirect of [{ successUrl: 'https://evil.example/x' }, { cancelUrl: 'https://evil.example/x' }]) {
    before = sessionCount()
    const callsBefore = stripe.calls.length
    const evil = await send('POST', '/checkout', { token: ada.token, body: body({ priceId: PRICE, ...redirect }) })
    assertFailure(t, evil, 400, 'VALIDATION_FAILED', 'Validation failed', 'some')
    t.equal(sessionCount(), before, `${Object.keys(redirect)[0]}: no session created`)
    t.notOk(stripe.calls.slice(callsBefore).some((call) => call.path === '/v1/checkout/sessions'), 'no session requested')
  }

  // Opening a session expired the one before: the payer completes the last; Stripe delivers the signed event.
  t.equal(stripe.checkoutSessions.get(session.id).status, 'expired', 'the first session can no longer be paid')
  const last = ownSessions[0]
  if (last === undefined) return t.fail('no checkout session to complete')
  const { session: completed, subscription } = stripe.completeCheckout(last.id)
  const delivered = await deliver(checkoutSessionCompleted(completed))
  t.equal(delivered.statusCode, 200)

  const periodEnd = new Date(subscription.items.data[0].current_period_end * 1000).toISOString()
  const page = await send('GET', '/subscription', { token: ada.token })
  t.equal(page.statusCode, 200)
  const data = json(page).data
  t.equal(data.plan, 'pro')
  t.same(data.subscription, {
    id: subscription.id,
    customerId: completed.customer,
    status: 'active',
    priceId: PRICE,
    currentPeriodEnd: periodEnd,
    cancelAtPeriodEnd: false,
    plan: 'pro'
  })
  t.match(data, { status: 'active', subscriptionId: subscription.id, priceId: PRICE, currentPeriodEnd: periodEnd, cancelAtPeriodEnd: false }, 'the flat fields stay')

  const again = await send('POST', '/checkout', { token: ada.token, body: body({ priceId: PRICE }) })
  assertFailure(t, again, 409, 'SUBSCRIPTION_ALREADY_ACTIVE')
})

t.test('manage billing after paying: the portal URL', async (t) => {
  stripe.reset()
  const res = await send('POST', '/billing-portal', { token: ada.token })
  t.equal(res.statusCode, 200, `portal answered ${res.body}`)
  t.match(json(res), { success: true, data: { url: /^https:\/\/billing\.stripe\.test\// } })
  t.same(Object.keys(json(res).data ?? {}), ['url'])
  const customer = [...stripe.customers.values()].find((c) => c.metadata?.userId === ada.id)?.id
  t.type(customer, 'string', 'the customer checkout created')
  t.match(stripe.calls, [{ method: 'POST', path: '/v1/billing_portal/sessions', params: { customer } }], 'a portal session for the stored customer')
})

t.test('cancel the subscription: empty JSON body', async (t) => {
  const res = await send('DELETE', '/subscription', { token: ada.token })
  t.equal(res.statusCode, 200, `cancel answered ${res.body}`)
  t.match(json(res).data, { plan: 'pro', cancelAtPeriodEnd: true })
  const page = json(await send('GET', '/subscription', { token: ada.token })).data
  t.match(page.subscription, { status: 'active', cancelAtPeriodEnd: true, plan: 'pro' }, 'the renewal date shows as an end date')
})

t.test('tokens with exactly the documented claims', async (t) => {
  const user = await signUp('claims', 'the first password')
  await nextSecond()
  const token = documentedToken(user)
  const accepted = await send('GET', '/auth/me', { token })
  t.equal(accepted.statusCode, 200, `a token without extra claims answered ${accepted.body}`)
  t.equal(json(accepted).data?.id, user.id)

  await nextSecond()
  const changed = await send('PATCH', '/account/profile', { token: user.token, body: body({ currentPassword: 'the first password', newPassword: 'the second password' }) })
  t.equal(changed.statusCode, 200, `password change answered ${changed.body}`)
  t.match(json(changed), { success: true, data: { id: user.id }, token: String })

  assertFailure(t, await send('GET', '/auth/me', { token }), 401, 'UNAUTHORIZED', 'Unauthorized')
  const fresh = await send('GET', '/auth/me', { token: json(changed).token })
  t.equal(fresh.statusCode, 200, 'the token from the password change works')
  t.equal(json(fresh).data?.id, user.id)
  // Same claims, issued after the change: valid again, so the refusal above was the iat.
  await nextSecond()
  const later = await send('GET', '/auth/me', { token: documentedToken(user) })
  t.equal(later.statusCode, 200, `a documented token issued after the change answered ${later.body}`)
})

t.test('unknown route and rate limiting carry codes too', async (t) => {
  const missing = await send('GET', '/no-such-page', { token: ada.token })
  assertFailure(t, missing, 404, 'NOT_FOUND', 'Not found')
  // A JSON body does not turn an unknown route into a bad request.
  const missingWithBody = await send('POST', '/no-such-page', { token: ada.token, body: body({ name: 'x' }) })
  assertFailure(t, missingWithBody, 404, 'NOT_FOUND', 'Not found')

  // A service with a sign-in limit of one attempt per window.
  const limited = await build(t, { AUTH_RATE_LIMIT_MAX: '1' })
  const attempt = () => limited.inject({
    method: 'POST',
    url: '/auth/login',
    headers: { 'content-type': 'application/json' },
    payload: body({ email: 'guess@example.com', password: 'guess guess' })
  })
  const first = await attempt()
  assertFailure(t, first, 401, 'INVALID_CREDENTIALS', 'Invalid email or password')
  const second = await attempt()
  assertFailure(t, second, 429, 'RATE_LIMITED')
})

t.test('delete the account: empty JSON body, then the token is refused', async (t) => {
  const res = await send('DELETE', '/account/delete', { token: ada.token })
  t.equal(res.statusCode, 200, `delete answered ${res.body}`)
  t.same(json(res), { success: true, data: { deleted: true } })
  assertFailure(t, await send('GET', '/auth/me', { token: ada.token }), 401, 'UNAUTHORIZED', 'Unauthorized')
  const signIn = await send('POST', '/auth/login', { body: body({ email: ada.email, password: ada.password }) })
  assertFailure(t, signIn, 401, 'INVALID_CREDENTIALS', 'Invalid email or password')
})
