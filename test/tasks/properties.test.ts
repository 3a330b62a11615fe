// Property-based checks (fast-check): two users calling the API in any order never see each
// other's data nor reach plan or payment fields; any JSON body on any documented route gets a
// documented status and a well-formed envelope, never a 500 and never a hang.
import assert from 'node:assert/strict'
import { randomBytes, randomUUID } from 'node:crypto'
import fc from 'fast-check'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import { BODY_LIMIT } from '../../server-options.js'
import { createUserWithPreferences, earliestTokenIat } from '../../db/users.js'
import { ERROR_CODES } from '../../errors.js'
import { build, registerUser, type TestUser } from '../support/helper.js'
import { signedDelivery } from '../support/stripe-events.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'

const WEBHOOK_SECRET = 'whsec_test_properties_0123456789'
const PRICE = 'price_pro_monthly'
const ANSWER_TIMEOUT_MS = 5_000
const SEQUENCE_RUNS = 40
const SEQUENCE_MAX_CALLS = 20
const BODY_RUNS = 80
const WEBHOOK_RUNS = 500
// FC_SEED=<n> replays a reported failure.
const seed = process.env.FC_SEED === undefined ? undefined : Number(process.env.FC_SEED)

const stripe = await startStripeStandIn()
t.teardown(() => stripe.close())
const app = await build(t, {
  PAYMENT_SECRET_KEY: 'sk_test_standin',
  PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  PAYMENT_PRICE_IDS: PRICE,
  PAYMENT_API_URL: stripe.url,
  PAYMENT_MAX_RETRIES: '0',
  PAYMENT_TIMEOUT_MS: '1000'
})

// Each run comes from its own address, so per-IP limits (if any) never blur a property.
let clients = 0
function nextClientAddress (): string {
  clients++
  return `10.${(clients >> 16) & 255}.${(clients >> 8) & 255}.${clients & 255}`
}

/** app.inject, failing instead of waiting when the service does not answer in time. */
async function answer (opts: InjectOptions): Promise<LightMyRequestResponse> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ANSWER_TIMEOUT_MS} ms: ${opts.method} ${opts.url}`)), ANSWER_TIMEOUT_MS)
  })
  try {
    return await Promise.race([app.inject(opts), timeout])
  } finally {
    clearTimeout(timer)
  }
}

const parseJson = (res: LightMyRequestResponse): any => {
  try {
    return JSON.parse(res.body)
  } catch {
    throw new Error(`${res.statusCode} answer is not JSON: ${res.body.slice(0, 200)}`)
  }
}

// ---------------------------------------------------------------------------------------
// Property 1: tenant isolation under random call sequences by two users
// ---------------------------------------------------------------------------------------

type Who = 'a' | 'b'
interface Party { label: Who, user: TestUser, marker: string }

/** Every piece of a party's data carries its marker, so a leak is a substring. */
async function makeParty (label: Who): Promise<Party> {
  const marker = `mk${label}${randomBytes(8).toString('hex')}`
  const user = await registerUser(app, { email: `${marker}@example.com`, name: `Name ${marker}` })
  return { label, user, marker }
}
const parties: Record<Who, Party> = { a: await makeParty('a'), b: await makeParty('b') }
const otherOf = (who: Who): Who => who === 'a' ? 'b' : 'a'

// Placeholders in generated bodies, filled in for the caller at run time (readable counterexamples).
const OWN_MARKER = '<own-marker>'
const OTHER_USER_ID = '<other-user-id>'
const fill = (value: unknown, me: Party, other: Party): unknown =>
  JSON.parse(JSON.stringify(value).replaceAll(OWN_MARKER, me.marker).replaceAll(OTHER_USER_ID, other.user.id))

const who = fc.constantFrom<Who>('a', 'b')
const marked = (maxLength: number) => fc.string({ unit: 'grapheme', maxLength }).map((s) => `${OWN_MARKER} ${s}`)

/** Fields no client may write: plan, payment fields, ownership. */
const forbiddenFields = fc.record({
  plan: fc.constantFrom('pro', 'enterprise', 'free'),
  paymentCustomerId: fc.constantFrom('cus_stolen', ''),
  paymentSubscriptionId: fc.constant('sub_stolen'),
  paymentSubscriptionStatus: fc.constantFrom('active', 'trialing'),
  paymentPriceId: fc.constant(PRICE),
  paymentCurrentPeriodEnd: fc.constant('2099-01-01T00:00:00.000Z'),
  payment_customer_id: fc.constant('cus_stolen'),
  payment_subscription_status: fc.constant('active'),
  cancelAtPeriodEnd: fc.boolean(),
  userId: fc.constant(OTHER_USER_ID),
  user_id: fc.constant(OTHER_USER_ID),
  id: fc.constant(OTHER_USER_ID)
}, { requiredKeys: [] })
const maybeForbidden = fc.oneof({ arbitrary: fc.constant({}), weight: 2 }, { arbitrary: forbiddenFields, weight: 1 })
const withForbidden = <T extends object>(fields: fc.Arbitrary<T>) =>
  fc.tuple(fields, maybeForbidden).map(([allowed, extra]) => ({ ...allowed, ...extra }))

const taskFields = {
  title: marked(30),
  description: fc.option(marked(40), { nil: null }),
  status: fc.constantFrom('todo', 'in-progress', 'completed'),
  dueDate: fc.option(fc.constant('2030-01-01T09:00:00.000Z'), { nil: null })
}
const createTaskBody = withForbidden(fc.record(taskFields, { requiredKeys: ['title'] }))
const updateTaskBody = withForbidden(fc.record(taskFields, { requiredKeys: [] }))
const preferencesBody = withForbidden(fc.record({
  theme: fc.oneof(fc.constantFrom('light', 'dark', 'system'), fc.string({ maxLength: 8 })),
  language: fc.oneof(fc.constantFrom('en', 'pt-BR', 'fra'), fc.string({ maxLength: 12 })),
  defaultStatus: fc.constantFrom('todo', 'in-progress', 'completed', 'done'),
  emailNotifications: fc.oneof(fc.boolean(), fc.constantFrom('true', 1, null)),
  taskReminders: fc.boolean(),
  weeklyDigest: fc.boolean()
}, { requiredKeys: [] }))
const profileBody = withForbidden(fc.record({ name: fc.option(marked(30), { nil: null }) }))

/** A task id: one of the caller's, one of the other user's, or anything at all. */
const taskRef = fc.oneof(
  fc.record({ kind: fc.constantFrom('own', 'other'), index: fc.nat(20) }),
  fc.record({ kind: fc.constant('raw'), value: fc.oneof(fc.integer({ min: -3, max: 2 ** 31 + 3 }), fc.constantFrom('abc', '1.5', '1e3', '0x10', '007')) })
)

const callArb = fc.oneof(
  { arbitrary: fc.record({ who, op: fc.constant('createTask'), body: createTaskBody }), weight: 4 },
  { arbitrary: fc.record({ who, op: fc.constant('listTasks'), query: fc.constantFrom('', '?status=todo', '?status=completed', '?limit=1', '?limit=100&offset=1') }), weight: 2 },
  { arbitrary: fc.record({ who, op: fc.constantFrom('getTask', 'deleteTask'), ref: taskRef }), weight: 3 },
  { arbitrary: fc.record({ who, op: fc.constantFrom('patchTask', 'putTask'), ref: taskRef, body: updateTaskBody }), weight: 4 },
  { arbitrary: fc.record({ who, op: fc.constantFrom('getPreferences', 'getProfile', 'getMe', 'getSubscription') }), weight: 2 },
  { arbitrary: fc.record({ who, op: fc.constantFrom('patchPreferences', 'putPreferences'), body: preferencesBody }), weight: 2 },
  { arbitrary: fc.record({ who, op: fc.constant('patchProfile'), body: profileBody }), weight: 1 }
)
type Call = typeof callArb extends fc.Arbitrary<infer C> ? C : never

interface ModelTask { owner: Who, title: string }
type Model = Map<number, ModelTask>

function resolveTaskId (ref: Extract<Call, { ref: unknown }>['ref'], caller: Who, model: Model): string {
  if (ref.kind === 'raw') return String(ref.value)
  const owner = ref.kind === 'own' ? caller : otherOf(caller)
  const ids = [...model].filter(([, task]) => task.owner === owner).map(([id]) => id)
  // Nothing to point at yet: an id that most likely does not exist.
  return String(ids.length === 0 ? 1_000_000 + ref.index : ids[ref.index % ids.length])
}

function request (call: Call, me: Party, other: Party, model: Model): { method: InjectOptions['method'], url: string, payload?: unknown, taskId?: string } {
  switch (call.op) {
    case 'createTask': return { method: 'POST', url: '/tasks', payload: fill(call.body, me, other) }
    case 'listTasks': return { method: 'GET', url: `/tasks${call.query}` }
    case 'getTask':
    case 'deleteTask': {
      const taskId = resolveTaskId(call.ref, me.label, model)
      return { method: call.op === 'getTask' ? 'GET' : 'DELETE', url: `/tasks/${taskId}`, taskId }
    }
    case 'patchTask':
    case 'putTask': {
      const taskId = resolveTaskId(call.ref, me.label, model)
      return { method: call.op === 'patchTask' ? 'PATCH' : 'PUT', url: `/tasks/${taskId}`, payload: fill(call.body, me, other), taskId }
    }
    case 'getPreferences': return { method: 'GET', url: '/preferences' }
    case 'getProfile': return { method: 'GET', url: '/account/profile' }
    case 'getMe': return { method: 'GET', url: '/auth/me' }
    case 'getSubscription': return { method: 'GET', url: '/subscription' }
    case 'patchPreferences': return { method: 'PATCH', url: '/preferences', payload: fill(call.body, me, other) }
    case 'putPreferences': return { method: 'PUT', url: '/preferences', payload: fill(call.body, me, other) }
    case 'patchProfile': return { method: 'PATCH', url: '/account/profile', payload: fill(call.body, me, other) }
  }
}

const TASK_ANSWERS = new Set(['createTask', 'getTask', 'patchTask', 'putTask'])

async function performCall (call: Call, model: Model, remoteAddress: string): Promise<void> {
  const me = parties[call.who]
  const other = parties[otherOf(call.who)]
  const { method, url, payload, taskId } = request(call, me, other, model)
  const where = `${call.who} ${method} ${url}`
  const res = await answer({ method, url, headers: me.user.auth, remoteAddress, ...(payload !== undefined && { payload: payload as object }) })

  // Nothing of the other user's, anywhere in the answer.
  const seen = `${JSON.stringify(res.headers)}\n${res.body}`.toLowerCase()
  for (const [what, secret] of [['marker', other.marker], ['email', other.user.email], ['user id', other.user.id]] as const) {
    assert.ok(!seen.includes(secret.toLowerCase()), `${where}: the answer (${res.statusCode}) contains ${other.label}'s ${what}: ${res.body.slice(0, 500)}`)
  }

  const target = taskId !== undefined && /^\d+$/.test(taskId) ? model.get(Number(taskId)) : undefined
  if (taskId !== undefined && target?.owner !== me.label) {
    // Another user's task and a missing one look the same; a bad body may be refused first.
    assert.ok([400, 404].includes(res.statusCode), `${where}: a task that is not the caller's answered ${res.statusCode}: ${res.body}`)
    if (res.statusCode === 404) assert.deepEqual(parseJson(res), { success: false, error: 'Task not found', code: 'TASK_NOT_FOUND' }, `${where}: 404 body`)
    return
  }
  assert.ok([200, 201, 400].includes(res.statusCode), `${where}: unexpected ${res.statusCode}: ${res.body}`)
  if (res.statusCode === 400) return

  const body = parseJson(res)
  if (call.op === 'createTask') {
    assert.equal(res.statusCode, 201, `${where}: create answered ${res.statusCode}`)
    model.set(body.data.id, { owner: me.label, title: body.data.title })
  }
  const tasks: Array<{ id: number, title: string }> = call.op === 'listTasks' ? body.data : TASK_ANSWERS.has(call.op) ? [body.data] : []
  for (const task of tasks) {
    assert.equal(model.get(task.id)?.owner, me.label, `${where}: answered task ${task.id}, which is not the caller's`)
    assert.ok(task.title.startsWith(me.marker), `${where}: answered a task titled ${JSON.stringify(task.title)}`)
  }
  if (call.op === 'patchTask' || call.op === 'putTask') model.set(body.data.id, { owner: me.label, title: body.data.title })
  if (call.op === 'deleteTask') model.delete(Number(taskId))
}

const NO_BILLING = {
  plan: 'free',
  payment_customer_id: null,
  payment_subscription_id: null,
  payment_subscription_status: null,
  payment_price_id: null,
  payment_current_period_end: null,
  payment_state_at: null,
  cancel_at_period_end: false
}

async function assertStoredState (model: Model): Promise<void> {
  const ids = [parties.a.user.id, parties.b.user.id]
  const ownerOf = (userId: string): Who => userId === parties.a.user.id ? 'a' : 'b'
  const tasks = await app.db.selectFrom('tasks').select(['id', 'user_id', 'title']).where('user_id', 'in', ids).orderBy('id').execute()
  assert.deepEqual(
    tasks.map((row) => ({ id: row.id, owner: ownerOf(row.user_id), title: row.title })),
    [...model].sort(([x], [y]) => x - y).map(([id, task]) => ({ id, ...task })),
    'stored tasks: each user changed only their own'
  )
  const preferences = await app.db.selectFrom('user_preferences').select(Object.keys(NO_BILLING) as Array<keyof typeof NO_BILLING>)
    .select('user_id').where('user_id', 'in', ids).orderBy('user_id').execute()
  assert.equal(preferences.length, 2, 'one preferences row per user')
  for (const { user_id: userId, ...billing } of preferences) {
    assert.deepEqual(billing, NO_BILLING, `${ownerOf(userId)}: plan and payment fields untouched`)
  }
  const users = await app.db.selectFrom('users').select(['id', 'email']).where('id', 'in', ids).orderBy('id').execute()
  assert.deepEqual(users, [parties.a, parties.b].map((p) => ({ id: p.user.id, email: p.user.email })).sort((x, y) => x.id < y.id ? -1 : 1), 'users keep their ids and emails')
}

t.test(`property 1 (${SEQUENCE_RUNS} runs of up to ${SEQUENCE_MAX_CALLS} calls): two users never see each other's data, and no body reaches plan or payment fields`, async (t) => {
  let calls = 0
  await fc.assert(fc.asyncProperty(fc.array(callArb, { minLength: 1, maxLength: SEQUENCE_MAX_CALLS }), async (sequence) => {
    // Every run starts from no tasks, so a counterexample replays on its own.
    await app.db.deleteFrom('tasks').where('user_id', 'in', [parties.a.user.id, parties.b.user.id]).execute()
    const model: Model = new Map()
    const remoteAddress = nextClientAddress()
    for (const call of sequence) {
      await performCall(call, model, remoteAddress)
      calls++
    }
    await assertStoredState(model)
  }), { numRuns: SEQUENCE_RUNS, seed })
  t.ok(calls >= SEQUENCE_RUNS, `${calls} calls in ${SEQUENCE_RUNS} sequences, no leak, no write across users`)
})

// ---------------------------------------------------------------------------------------
// Property 2: any JSON body on any documented route
// ---------------------------------------------------------------------------------------

type Body = Record<string, unknown>
interface Operation { method: string, path: string, statuses: Set<number>, isPublic: boolean, bodyFields: string[], examples: Body[] }
interface MediaType {
  schema?: { properties?: Record<string, { examples?: unknown[], enum?: unknown[] }> }
  example?: Body
  examples?: Record<string, { value: Body }>
}

const openapi = (await app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
  paths: Record<string, Record<string, { security?: unknown[], responses: Record<string, unknown>, requestBody?: { content: Record<string, MediaType> } }>>
}

/** The documented example bodies, plus one made of each field's own example. */
function exampleBodies (media: MediaType | undefined): Body[] {
  if (media === undefined) return []
  const fromFields = Object.fromEntries(Object.entries(media.schema?.properties ?? {})
    .map(([name, field]) => [name, field.examples?.[0] ?? field.enum?.[0]])
    .filter(([, value]) => value !== undefined))
  return [
    ...(media.example === undefined ? [] : [media.example]),
    ...Object.values(media.examples ?? {}).map((example) => example.value),
    ...(Object.keys(fromFields).length === 0 ? [] : [fromFields])
  ]
}

const operations: Operation[] = Object.entries(openapi.paths).flatMap(([path, methods]) =>
  Object.entries(methods).map(([method, op]) => {
    const media = op.requestBody?.content['application/json']
    return {
      method: method.toUpperCase(),
      path,
      statuses: new Set(Object.keys(op.responses).map(Number)),
      isPublic: op.security === undefined || op.security.length === 0,
      bodyFields: Object.keys(media?.schema?.properties ?? {}),
      examples: exampleBodies(media)
    }
  }))
// Sign-out and account deletion end the session: they go last.
const LAST = ['POST /auth/logout', 'DELETE /account/delete']
const rank = (op: Operation) => LAST.indexOf(`${op.method} ${op.path}`)
operations.sort((x, y) => rank(x) - rank(y))

// Placeholders for what JSON.stringify cannot write; rendered into the raw text.
const SPECIAL = /"@@(num|huge|deep|deepobj):([^@"]+)@@"/g
function render (value: unknown): string {
  return (JSON.stringify(value) ?? 'null').replace(SPECIAL, (_match, kind: string, arg: string) => {
    const n = Number(arg)
    switch (kind) {
      case 'num': return arg
      case 'huge': return JSON.stringify('x'.repeat(n))
      case 'deep': return `${'['.repeat(n)}${']'.repeat(n)}`
      default: return `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`
    }
  })
}

const knownFields = [...new Set([
  ...operations.flatMap((op) => op.bodyFields),
  'plan', 'paymentCustomerId', 'paymentSubscriptionId', 'paymentSubscriptionStatus', 'userId', 'user_id', 'id'
])]
const dangerousKeys = ['__proto__', 'constructor', 'prototype']
const special = fc.oneof(
  fc.constantFrom('1e999', '-1e999', '123456789012345678901234567890', '-0', '1e-400', '2147483648', '9007199254740993', '-2147483649').map((n) => `@@num:${n}@@`),
  fc.constantFrom(256, 10_001, 100_000, BODY_LIMIT + 1).map((n) => `@@huge:${n}@@`),
  fc.integer({ min: 32, max: 50_000 }).map((n) => `@@deep:${n}@@`),
  fc.integer({ min: 32, max: 50_000 }).map((n) => `@@deepobj:${n}@@`)
)
const plausible = fc.constantFrom(
  'todo', 'in-progress', 'completed', 'light', 'dark', 'system', 'en', 'pt-BR', PRICE, 'fuzz@example.com',
  'correct horse battery', '2030-01-01T09:00:00Z', 'https://example.com/a.png', '', ' ', 'null', true, false, null, 0, -1, 1
)
// Strings that break naive storage or parsing: NUL (PostgreSQL text refuses it), a lone
// surrogate, direction overrides, SQL and path fragments.
const nasty = fc.oneof(
  fc.constantFrom('\u0000', 'a\u0000b', 'nul\u0000@example.com', 'https://example.com/\u0000'),
  fc.constantFrom('\ud800', '\u202e\u0301', "'; drop table users; --", '../../etc/passwd', '%00', '\\')
)
const fieldValue = fc.oneof(
  { arbitrary: fc.jsonValue({ maxDepth: 2 }), weight: 3 },
  { arbitrary: plausible, weight: 3 },
  { arbitrary: nasty, weight: 2 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 20 }), weight: 2 },
  { arbitrary: fc.constantFrom(2 ** 31, 2 ** 53 + 2, Number.MAX_VALUE, -Number.MAX_VALUE, Number.MIN_VALUE, 1e21, 0.5), weight: 1 },
  { arbitrary: special, weight: 1 }
)
const dangerousObject = fc.dictionary(fc.constantFrom(...dangerousKeys, ...knownFields), fc.oneof(
  fieldValue,
  fc.dictionary(fc.constantFrom(...dangerousKeys, 'polluted', 'isAdmin'), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 })
), { minKeys: 1, maxKeys: 4 })
const bodyArb = fc.oneof(
  { arbitrary: fc.jsonValue(), weight: 3 },
  { arbitrary: fc.dictionary(fc.constantFrom(...knownFields), fieldValue, { minKeys: 1, maxKeys: 6 }), weight: 5 },
  { arbitrary: dangerousObject, weight: 2 },
  { arbitrary: special, weight: 1 },
  { arbitrary: fc.array(fieldValue, { maxLength: 4 }), weight: 1 }
)

// The list's counts sit beside `data` (GET /tasks).
// Beside `data`, what the spec and auth-extensions put at the top: a sign-in's token and user (or its
// second factor's challenge), the task counts and next page, a new API key (shown once), the passkeys' user handle.
const ENVELOPE_KEYS = new Set([
  'success', 'data', 'token', 'user', 'total', 'todo', 'inProgress', 'completed', 'nextOffset', 'nextBefore',
  'mfaRequired', 'mfaToken', 'methods', 'recoveryCodesLeft', 'key', 'userHandle'
])

/** The answer is documented for the operation, never a 500, and its body is well formed. */
function assertWellFormed (op: Operation, res: LightMyRequestResponse, where: string): void {
  assert.notEqual(res.statusCode, 500, `${where}: 500 ${res.body}`)
  assert.ok(op.statuses.has(res.statusCode), `${where}: ${res.statusCode} is not documented (${[...op.statuses].join(', ')}): ${res.body.slice(0, 300)}`)
  // A redirect (the provider callback answers nothing else): a Location and no body.
  if (res.statusCode >= 300 && res.statusCode < 400) {
    assert.match(String(res.headers.location ?? ''), /^https?:\/\//, `${where}: a redirect without a Location`)
    assert.equal(res.body, '', `${where}: a redirect with a body`)
    return
  }
  const contentType = String(res.headers['content-type'] ?? '')
  if ((op.path === '/health' || op.path === '/ready') && res.statusCode === 200) {
    assert.match(contentType, /^text\/plain/, `${where}: content type`)
    assert.equal(res.body, 'OK', `${where}: body`)
    return
  }
  assert.match(contentType, /^application\/json/, `${where}: content type`)
  const body = parseJson(res)
  assert.ok(body !== null && typeof body === 'object' && !Array.isArray(body), `${where}: body is not an object: ${res.body.slice(0, 300)}`)
  if (res.statusCode < 400) {
    if (op.path === '/webhooks/payment') {
      assert.deepEqual(body, { received: true }, `${where}: webhook acknowledgement`)
      return
    }
    assert.equal(body.success, true, `${where}: success flag: ${res.body.slice(0, 300)}`)
    assert.ok('data' in body || ('token' in body && 'user' in body), `${where}: success without data: ${res.body.slice(0, 300)}`)
    for (const key of Object.keys(body)) assert.ok(ENVELOPE_KEYS.has(key), `${where}: unexpected key ${key}`)
    return
  }
  const { success, error, code, details, ...rest } = body
  assert.equal(success, false, `${where}: success flag: ${res.body.slice(0, 300)}`)
  assert.ok(typeof error === 'string' && error.length > 0, `${where}: error is not a string: ${res.body.slice(0, 300)}`)
  assert.ok((ERROR_CODES as string[]).includes(code), `${where}: code is not one of the catalog's: ${res.body.slice(0, 300)}`)
  assert.ok(details === undefined || (Array.isArray(details) && details.every((d: unknown) => typeof d === 'string')), `${where}: details: ${res.body.slice(0, 300)}`)
  assert.deepEqual(rest, {}, `${where}: keys beside success, error, code, details`)
}

// A valid bcrypt hash for the throwaway users (their password is the helper's default).
const { password: passwordHash } = await app.db.selectFrom('users').select('password').where('id', '=', parties.a.user.id).executeTakeFirstOrThrow()

/**
 * The operation's own documented example with one field swapped for an odd value: valid
 * but for that field, so the value gets past validation to the handler and the database.
 */
const swapArb = fc.record({ value: fc.oneof({ arbitrary: fieldValue, weight: 2 }, { arbitrary: nasty, weight: 1 }), index: fc.nat() })
function swappedExample (op: Operation, swap: { value: unknown, index: number }): Body | undefined {
  if (op.examples.length === 0) return undefined
  const base = op.examples[swap.index % op.examples.length] as Body
  const keys = Object.keys(base)
  return { ...base, [keys[swap.index % keys.length] as string]: swap.value }
}

/** A fresh token for the user as stored now (a password change ends older ones). */
async function freshAuth (userId: string): Promise<{ authorization: string }> {
  const row = await app.db.selectFrom('users').select(['email', 'password_changed_at']).where('id', '=', userId).executeTakeFirst()
  // Once deleted, any well-signed token of theirs must be refused.
  const iat = Math.max(Math.floor(Date.now() / 1000), row === undefined ? 0 : earliestTokenIat(row))
  const token = app.jwt.sign({ sub: userId, email: row?.email ?? 'gone@example.com', jti: randomUUID(), iat })
  return { authorization: `Bearer ${token}` }
}

t.test(`property 2 (${BODY_RUNS} runs × ${operations.length} operations, protected ones with and without a token): any JSON body (and each route's own example with one field swapped) gets a documented status and a well-formed envelope, never a 500 or a hang`, async (t) => {
  t.ok(operations.length >= 20, `${operations.length} operations documented in /openapi.json`)
  let requests = 0
  await fc.assert(fc.asyncProperty(bodyArb, swapArb, async (value, swap) => {
    const remoteAddress = nextClientAddress()
    // A user of its own per run: sign-out, password change and deletion touch nobody else.
    const user = await createUserWithPreferences(app.db, { id: randomUUID(), name: 'Fuzz', email: `fuzz-${randomUUID()}@example.com`, passwordHash })
    const created = await answer({ method: 'POST', url: '/tasks', headers: await freshAuth(user.id), remoteAddress, payload: { title: 'fuzz target' } })
    assert.equal(created.statusCode, 201, `setup task: ${created.body}`)
    const taskId = String(parseJson(created).data.id)
    // Protected operations with a token; every operation without one (public ones ignore it).
    for (const authenticated of [true, false]) {
      for (const op of operations.filter((op) => !authenticated || !op.isPublic)) {
        const url = op.path.replace('{id}', taskId)
        const swapped = swappedExample(op, swap)
        for (const text of swapped === undefined ? [render(value)] : [render(value), render(swapped)]) {
          const where = `${authenticated ? 'with' : 'without'} token ${op.method} ${url} body ${text.length > 200 ? `${text.slice(0, 200)}… (${text.length} chars)` : text}`
          const headers = { 'content-type': 'application/json', ...(authenticated && await freshAuth(user.id)) }
          const res = await answer({ method: op.method as InjectOptions['method'], url, headers, remoteAddress, payload: text })
          requests++
          assertWellFormed(op, res, where)
          if (!authenticated && !op.isPublic) {
            assert.deepEqual({ status: res.statusCode, body: parseJson(res) }, { status: 401, body: { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' } }, `${where}: protected route without a token`)
          }
        }
      }
    }
  }), { numRuns: BODY_RUNS, seed })
  t.ok(requests >= BODY_RUNS * operations.length, `${requests} requests answered as documented`)
})

// ---------------------------------------------------------------------------------------
// Property 2, webhook: random bodies that carry a valid signature reach the event handling
// ---------------------------------------------------------------------------------------

// A subscriber the events can reach: a customer and a subscription the stand-in knows.
const SUBSCRIBER_CUSTOMER = 'cus_fuzz_subscriber'
const subscriber = await createUserWithPreferences(app.db, { id: randomUUID(), name: 'Subscriber', email: `subscriber-${randomUUID()}@example.com`, passwordHash })
const subscription = stripe.createSubscription({ customer: SUBSCRIBER_CUSTOMER, price: PRICE, metadata: { userId: subscriber.id } })
const resetSubscriber = () => app.db.updateTable('user_preferences')
  .set({ ...NO_BILLING, payment_customer_id: SUBSCRIBER_CUSTOMER })
  .where('user_id', '=', subscriber.id).execute()

const EVENT_TYPES = ['checkout.session.completed', 'customer.subscription.updated', 'customer.subscription.deleted', 'invoice.payment_succeeded', 'invoice.payment_failed']
const unixTime = fc.oneof(
  { arbitrary: fc.integer({ min: 0, max: 2 ** 31 }), weight: 3 },
  { arbitrary: fc.constantFrom(2 ** 53 + 2, 1e20, -1e15, 8.64e12 + 1, 0.5, -1), weight: 1 },
  { arbitrary: fieldValue, weight: 1 }
)
const either = <T>(usual: fc.Arbitrary<T>) => fc.oneof({ arbitrary: usual, weight: 3 }, { arbitrary: fieldValue, weight: 1 })
const providerObject = fc.record({
  id: either(fc.constantFrom(subscription.id, 'sub_unknown', 'cs_fuzz', 'in_fuzz')),
  object: fc.constantFrom('checkout.session', 'subscription', 'invoice'),
  mode: either(fc.constant('subscription')),
  client_reference_id: either(fc.constant(subscriber.id)),
  customer: either(fc.constantFrom(SUBSCRIBER_CUSTOMER, 'cus_unknown')),
  subscription: either(fc.constantFrom(subscription.id, 'sub_unknown')),
  status: either(fc.constantFrom('active', 'canceled', 'past_due', 'trialing', 'incomplete')),
  metadata: either(fc.record({ userId: fc.constant(subscriber.id) })),
  items: either(fc.record({ data: fc.array(fc.record({ price: either(fc.record({ id: either(fc.constant(PRICE)) })), current_period_end: unixTime }, { requiredKeys: [] }), { maxLength: 2 }) })),
  cancel_at_period_end: either(fc.boolean()),
  parent: either(fc.record({ subscription_details: either(fc.record({ subscription: either(fc.constantFrom(subscription.id, 'sub_unknown')) })) })),
  lines: either(fc.record({ data: fc.array(fc.record({ period: either(fc.record({ end: unixTime })) }), { maxLength: 2 }) }))
}, { requiredKeys: [] })
const fuzzedEvent = fc.record({
  id: fc.oneof(
    { arbitrary: fc.uuid().map((u) => `evt_${u}`), weight: 4 },
    { arbitrary: fc.constantFrom('@@huge:300@@', 'evt_\u0000'), weight: 1 },
    { arbitrary: fieldValue, weight: 1 }
  ),
  object: fc.constant('event'),
  type: either(fc.constantFrom(...EVENT_TYPES)),
  created: unixTime,
  data: either(fc.record({ object: either(providerObject) }))
}, { requiredKeys: [] })
// Well-formed events (every field plausible), so a share of the runs reaches the database
// and the plan rule is exercised every time, whatever the seed.
const wellFormedEvent = fc.record({
  id: fc.uuid().map((u) => `evt_${u}`),
  object: fc.constant('event'),
  type: fc.constantFrom(...EVENT_TYPES),
  created: fc.integer({ min: 0, max: 2 ** 31 }),
  data: fc.record({
    object: fc.record({
      id: fc.constantFrom(subscription.id, 'cs_fuzz', 'in_fuzz'),
      mode: fc.constant('subscription'),
      client_reference_id: fc.constant(subscriber.id),
      customer: fc.constant(SUBSCRIBER_CUSTOMER),
      subscription: fc.constant(subscription.id),
      status: fc.constantFrom('active', 'canceled', 'past_due', 'trialing', 'incomplete'),
      metadata: fc.record({ userId: fc.constant(subscriber.id) }),
      items: fc.record({ data: fc.array(fc.record({ price: fc.record({ id: fc.constant(PRICE) }), current_period_end: fc.integer({ min: 0, max: 2 ** 31 }) }), { minLength: 1, maxLength: 2 }) }),
      cancel_at_period_end: fc.boolean(),
      parent: fc.record({ subscription_details: fc.record({ subscription: fc.constant(subscription.id) }) }),
      lines: fc.record({ data: fc.array(fc.record({ period: fc.record({ end: fc.integer({ min: 0, max: 2 ** 31 }) }) }), { minLength: 1, maxLength: 2 }) })
    })
  })
})
const eventArb = fc.oneof({ arbitrary: wellFormedEvent, weight: 1 }, { arbitrary: fuzzedEvent, weight: 2 })

t.test(`property 2, webhook (${WEBHOOK_RUNS} runs): any signed body is acknowledged or refused with an envelope, never a 500 or a hang`, async (t) => {
  const webhook = operations.find((op) => op.method === 'POST' && op.path === '/webhooks/payment')
  assert.ok(webhook, 'the webhook is documented')
  let applied = 0
  const statuses: Record<number, number> = {}
  await fc.assert(fc.asyncProperty(fc.oneof({ arbitrary: bodyArb, weight: 1 }, { arbitrary: eventArb, weight: 3 }), async (value) => {
    await resetSubscriber()
    const text = render(value)
    const where = `signed POST /webhooks/payment body ${text.length > 300 ? `${text.slice(0, 300)}… (${text.length} chars)` : text}`
    const { headers } = signedDelivery(undefined, WEBHOOK_SECRET, { body: text })
    const res = await answer({ method: 'POST', url: '/webhooks/payment', headers, remoteAddress: nextClientAddress(), payload: text })
    statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
    assertWellFormed(webhook, res, where)
    // Whatever was applied, the plan follows the stored status (docs/billing.md: `pro` while live, else `free`).
    const stored = await app.db.selectFrom('user_preferences').select(['plan', 'payment_subscription_status', 'payment_state_at'])
      .where('user_id', '=', subscriber.id).executeTakeFirstOrThrow()
    const live = ['active', 'trialing', 'past_due'].includes(stored.payment_subscription_status ?? '')
    assert.equal(stored.plan, live ? 'pro' : 'free', `${where}: plan ${stored.plan} with status ${stored.payment_subscription_status}`)
    if (stored.payment_state_at !== null) applied++
  }), { numRuns: WEBHOOK_RUNS, seed })
  t.comment(`webhook answers by status: ${JSON.stringify(statuses)}`)
  t.ok(applied > 0, `${applied} of ${WEBHOOK_RUNS} signed bodies changed the subscriber; none broke the plan rule`)
})
