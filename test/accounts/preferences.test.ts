// The preferences routes: defaults, a missing row as the defect it is, user-editable fields
// (PATCH and PUT alike), and the refusal of plan and payment fields.
import t from 'tap'
import { json, registerUser, sharedApp, type TestUser } from '../support/helper.js'

const app = await sharedApp()
const alice = await registerUser(app)
const bob = await registerUser(app)

// The response uses the origin web client's vocabulary (spec/client-compat.md).
const DEFAULTS = {
  theme: 'system',
  language: 'en',
  timezone: null,
  plan: 'free',
  defaultStatus: 'todo',
  defaultTaskStatus: 'todo',
  emailNotifications: 'enabled',
  taskReminders: 'enabled',
  weeklyDigest: 'disabled',
  pushNotifications: 'disabled',
  paymentCustomerId: null,
  paymentSubscriptionId: null,
  paymentSubscriptionStatus: null,
  paymentPriceId: null,
  paymentCurrentPeriodEnd: null
}

const getPreferences = (user: TestUser) => app.inject({ method: 'GET', url: '/preferences', headers: user.auth })
const writePreferences = (method: 'PATCH' | 'PUT', user: TestUser, payload: Record<string, unknown>) =>
  app.inject({ method, url: '/preferences', headers: user.auth, payload })

const storedRow = (userId: string) =>
  app.db.selectFrom('user_preferences').selectAll().where('user_id', '=', userId).executeTakeFirst()

/** The stored row in the shape of the API, for comparing what was written. */
async function stored (userId: string) {
  const row = await storedRow(userId)
  if (row === undefined) return undefined
  const toggle = (on: boolean) => on ? 'enabled' : 'disabled'
  return {
    theme: row.theme,
    language: row.language,
    timezone: row.timezone,
    plan: row.plan,
    defaultStatus: row.default_status,
    defaultTaskStatus: row.default_status,
    emailNotifications: toggle(row.email_notifications),
    taskReminders: toggle(row.task_reminders),
    weeklyDigest: toggle(row.weekly_digest),
    pushNotifications: toggle(row.push_notifications),
    paymentCustomerId: row.payment_customer_id,
    paymentSubscriptionId: row.payment_subscription_id,
    paymentSubscriptionStatus: row.payment_subscription_status,
    paymentPriceId: row.payment_price_id,
    paymentCurrentPeriodEnd: row.payment_current_period_end
  }
}

t.test('every /preferences method needs a valid token', async (t) => {
  for (const method of ['GET', 'PATCH', 'PUT'] as const) {
    const payload = method === 'GET' ? undefined : { theme: 'dark' }
    const missing = await app.inject({ method, url: '/preferences', payload })
    t.equal(missing.statusCode, 401, `${method} without a token`)
    t.same(json(missing), { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' })
    const garbage = await app.inject({ method, url: '/preferences', payload, headers: { authorization: 'Bearer not-a-jwt' } })
    t.equal(garbage.statusCode, 401, `${method} with a garbage token`)
    t.same(json(garbage), { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' })
  }
  t.same(await stored(alice.id), DEFAULTS, 'nothing was written')
})

t.test('GET /preferences: a new user has the defaults', async (t) => {
  const res = await getPreferences(alice)
  t.equal(res.statusCode, 200)
  const body = json(res)
  t.same(body, { success: true, data: DEFAULTS })
  t.same(Object.keys(body.data).sort(), Object.keys(DEFAULTS).sort(), 'exactly the documented keys')
  t.same(await stored(alice.id), DEFAULTS, 'registration stored the default row')
})

// Registration writes the row with the user; a user without one is a defect (db/preferences.ts):
// it answers 500 and is logged, and reads never write a row to hide it.
t.test('a user without a preferences row: GET and PATCH answer 500 and write nothing', async (t) => {
  const carol = await registerUser(app)
  await app.db.deleteFrom('user_preferences').where('user_id', '=', carol.id).execute()

  const read = await getPreferences(carol)
  t.equal(read.statusCode, 500)
  t.same(json(read), { success: false, error: 'Internal server error', code: 'INTERNAL_ERROR' })
  const write = await writePreferences('PATCH', carol, { theme: 'dark' })
  t.equal(write.statusCode, 500)
  t.same(json(write), { success: false, error: 'Internal server error', code: 'INTERNAL_ERROR' })
  t.equal(await storedRow(carol.id), undefined, 'no row was written')
})

t.test('PATCH /preferences updates the user-editable fields', async (t) => {
  const before = await storedRow(alice.id)
  const res = await writePreferences('PATCH', alice, {
    theme: 'dark',
    language: 'de',
    defaultStatus: 'in-progress',
    emailNotifications: false,
    taskReminders: false,
    weeklyDigest: true
  })
  t.equal(res.statusCode, 200)
  const expected = {
    ...DEFAULTS,
    theme: 'dark',
    language: 'de',
    defaultStatus: 'in-progress',
    defaultTaskStatus: 'in-progress',
    emailNotifications: 'disabled',
    taskReminders: 'disabled',
    weeklyDigest: 'enabled'
  }
  t.same(json(res), { success: true, data: expected }, 'the full preferences come back')
  t.same(await stored(alice.id), expected, 'and are stored')
  const after = await storedRow(alice.id)
  t.ok(Date.parse(after!.updated_at) > Date.parse(before!.updated_at), 'updated_at moved')
  t.same(json(await getPreferences(alice)), { success: true, data: expected }, 'GET reads them back')

  const partial = await writePreferences('PATCH', alice, { theme: 'light' })
  t.equal(partial.statusCode, 200)
  const expectedPartial = { ...expected, theme: 'light' }
  t.same(json(partial), { success: true, data: expectedPartial }, 'fields not sent are kept')
  t.same(await stored(alice.id), expectedPartial)
  t.same(await stored(bob.id), DEFAULTS, 'another user untouched')
})

t.test('PUT /preferences is the same partial update', async (t) => {
  const before = await stored(alice.id)
  const res = await writePreferences('PUT', alice, { weeklyDigest: false, defaultStatus: 'completed' })
  t.equal(res.statusCode, 200)
  const expected = { ...before, weeklyDigest: 'disabled', defaultStatus: 'completed', defaultTaskStatus: 'completed' }
  t.same(json(res), { success: true, data: expected }, 'omitted fields are kept, not reset')
  t.same(await stored(alice.id), expected)

  const single = await writePreferences('PUT', alice, { emailNotifications: true })
  t.equal(single.statusCode, 200)
  t.same(json(single), { success: true, data: { ...expected, emailNotifications: 'enabled' } })
  t.same(await stored(alice.id), { ...expected, emailNotifications: 'enabled' })
})

t.test('plan, payment fields and userId are refused with 400 on PATCH and PUT', async (t) => {
  const refused: Record<string, unknown> = {
    plan: 'pro',
    paymentCustomerId: 'cus_attacker',
    paymentSubscriptionId: 'sub_attacker',
    paymentSubscriptionStatus: 'active',
    paymentPriceId: 'price_attacker',
    paymentCurrentPeriodEnd: '2099-01-01T00:00:00.000Z',
    userId: bob.id
  }
  const before = await stored(alice.id)
  const bobBefore = await stored(bob.id)
  for (const method of ['PATCH', 'PUT'] as const) {
    for (const [field, value] of Object.entries(refused)) {
      const alone = await writePreferences(method, alice, { [field]: value })
      t.equal(alone.statusCode, 400, `${method} ${field}`)
      t.same(json(alone), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: [`Unknown field - ${field}`] })

      const withValid = await writePreferences(method, alice, { theme: 'dark', [field]: value })
      t.equal(withValid.statusCode, 400, `${method} ${field} beside a valid field`)
      t.same(json(withValid), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: [`Unknown field - ${field}`] })
    }
  }
  const after = await stored(alice.id)
  t.equal(after?.plan, 'free', 'the plan stays free')
  t.same(after, before, 'nothing was written, not even the valid field beside a refused one')
  t.same(await stored(bob.id), bobBefore, 'the user named by userId untouched')
  t.same(json(await getPreferences(alice)), { success: true, data: before })
})

t.test('PATCH /preferences refuses invalid values and stores nothing', async (t) => {
  const before = await stored(alice.id)
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ theme: 'blue' }, 'theme'],
    [{ theme: '' }, 'theme'],
    [{ language: 'english' }, 'language'],
    [{ language: 'EN' }, 'language'],
    [{ language: 'abc-abcdefgh' }, 'language'],
    [{ defaultStatus: 'done' }, 'defaultStatus'],
    [{ emailNotifications: 'yes' }, 'emailNotifications'],
    [{ emailNotifications: null }, 'emailNotifications'],
    [{ weeklyDigest: 'often' }, 'weeklyDigest'],
    [{ pushNotifications: 'on' }, 'pushNotifications'],
    [{ defaultTaskStatus: 'cancelled' }, 'defaultTaskStatus'],
    [{ defaultStatus: 'todo', defaultTaskStatus: 'completed' }, 'defaultTaskStatus'],
    [{ timezone: 'Mars/Olympus' }, 'timezone'],
    [{ timezone: '+01:00' }, 'timezone'],
    [{ timezone: 'Europe/Paris; drop table' }, 'timezone'],
    [{ timezone: `Europe/${'x'.repeat(94)}` }, 'timezone'],
    [{ timezone: '' }, 'timezone']
  ]
  for (const method of ['PATCH', 'PUT'] as const) {
    for (const [payload, field] of cases) {
      const res = await writePreferences(method, alice, payload)
      t.equal(res.statusCode, 400, `${method} ${JSON.stringify(payload)}`)
      const body = json(res)
      t.match(body, { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED' })
      t.equal(body.details?.length, 1, 'one detail')
      t.match(body.details, [new RegExp(` - ${field}$`)], 'naming the field')
    }
  }
  t.same(await stored(alice.id), before)
})

t.test('PATCH /preferences accepts a language tag with a region', async (t) => {
  const res = await writePreferences('PATCH', alice, { language: 'en-US' })
  t.equal(res.statusCode, 200)
  t.equal(json(res).data.language, 'en-US')
  t.equal((await stored(alice.id))?.language, 'en-US')
  const three = await writePreferences('PATCH', alice, { language: 'fil' })
  t.equal(three.statusCode, 200, 'three-letter codes too')
  t.equal((await stored(alice.id))?.language, 'fil')
})

t.test('an empty body is 400 on PATCH and PUT', async (t) => {
  const before = await stored(alice.id)
  for (const method of ['PATCH', 'PUT'] as const) {
    const res = await writePreferences(method, alice, {})
    t.equal(res.statusCode, 400, method)
    t.match(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: Array })
    t.equal(json(res).details.length, 1)
  }
  t.same(await stored(alice.id), before)
})

t.test('the origin client\'s vocabulary: both names of the default status, enabled/disabled or booleans, timezone', async (t) => {
  const res = await writePreferences('PUT', alice, { defaultTaskStatus: 'todo', emailNotifications: 'disabled', taskReminders: true, weeklyDigest: 'enabled', pushNotifications: true, timezone: 'America/Argentina/Buenos_Aires' })
  t.equal(res.statusCode, 200)
  t.match(json(res).data, { defaultStatus: 'todo', defaultTaskStatus: 'todo', emailNotifications: 'disabled', taskReminders: 'enabled', weeklyDigest: 'enabled', pushNotifications: 'enabled', timezone: 'America/Argentina/Buenos_Aires' })
  t.match(await storedRow(alice.id), { default_status: 'todo', email_notifications: false, task_reminders: true, weekly_digest: true, push_notifications: true, timezone: 'America/Argentina/Buenos_Aires' })

  const agreeing = await writePreferences('PATCH', alice, { defaultStatus: 'completed', defaultTaskStatus: 'completed', pushNotifications: 'disabled' })
  t.equal(agreeing.statusCode, 200, 'both names at once when they agree')
  t.match(json(agreeing).data, { defaultStatus: 'completed', defaultTaskStatus: 'completed', pushNotifications: 'disabled' })

  const lowerCase = await writePreferences('PATCH', alice, { timezone: 'europe/paris' })
  t.equal(json(lowerCase).data.timezone, 'Europe/Paris', 'a zone in another case is stored in its canonical spelling')
  const utc = await writePreferences('PATCH', alice, { timezone: 'UTC' })
  t.equal(json(utc).data.timezone, 'UTC')
  const cleared = await writePreferences('PATCH', alice, { timezone: null })
  t.equal(cleared.statusCode, 200)
  t.equal(json(cleared).data.timezone, null, 'null clears it')
  t.equal((await storedRow(alice.id))?.timezone, null)
})
