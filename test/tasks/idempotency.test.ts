// Idempotency-Key on POST /tasks, /checkout and /billing-portal (plugins/app/idempotency.ts):
// a retry gets the first answer and nothing is written twice, also when the repeats arrive
// together, when the first one's instance died, and at the provider.
import { randomUUID } from 'node:crypto'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import t from 'tap'
import { purgeIdempotencyKeys } from '../../db/idempotency.js'
import { billingSetup, PRICE } from '../support/billing-setup.js'
import { build, json, registerUser, sharedApp, type TestUser } from '../support/helper.js'

const app = await sharedApp()

const TASK = { title: 'Pay the rent', description: 'before the 5th', dueDate: '2026-12-01T09:00:00.000Z' }

const postTask = (user: TestUser, key: string | undefined, payload: Record<string, unknown> = TASK, on: FastifyInstance = app) =>
  on.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, ...(key === undefined ? {} : { 'idempotency-key': key }) }, payload })

async function count (on: FastifyInstance, table: 'tasks' | 'usage_events' | 'idempotency_keys', userId: string): Promise<number> {
  const row = await on.db.selectFrom(table).select((eb) => eb.fn.countAll<string>().as('n')).where('user_id', '=', userId).executeTakeFirstOrThrow()
  return Number(row.n)
}

const replayed = (res: LightMyRequestResponse) => res.headers['idempotent-replayed']

t.test('POST /tasks: a repeat with the key gets the first answer, and one task is stored', async (t) => {
  const user = await registerUser(app)
  const key = randomUUID()
  const first = await postTask(user, key)
  t.equal(first.statusCode, 201)
  t.equal(replayed(first), undefined, 'the first answer is no replay')
  const again = await postTask(user, key)
  t.equal(again.statusCode, 201)
  t.equal(again.body, first.body, 'the same body, byte for byte')
  t.equal(replayed(again), 'true')
  t.equal(again.headers['content-type'], first.headers['content-type'])
  // The same request with its fields in another order is the same request.
  const reordered = await postTask(user, key, { dueDate: TASK.dueDate, description: TASK.description, title: TASK.title })
  t.equal(reordered.statusCode, 201)
  t.equal(replayed(reordered), 'true')
  t.equal(await count(app, 'tasks', user.id), 1, 'one task')
  t.equal(await count(app, 'usage_events', user.id), 1, 'one task_created event')
  t.equal(await count(app, 'idempotency_keys', user.id), 1)
  t.same((await app.inject({ method: 'GET', url: '/tasks', headers: user.auth })).json().data, [json(first).data])
})

t.test('POST /tasks without the key is unchanged: each request creates a task, nothing is kept', async (t) => {
  const user = await registerUser(app)
  const a = await postTask(user, undefined)
  const b = await postTask(user, undefined)
  t.equal(a.statusCode, 201)
  t.equal(b.statusCode, 201)
  t.not(json(a).data.id, json(b).data.id)
  t.equal(replayed(b), undefined)
  t.equal(await count(app, 'tasks', user.id), 2)
  t.equal(await count(app, 'idempotency_keys', user.id), 0)
})

t.test('the same key with another body is 422 IDEMPOTENCY_KEY_REUSED, and nothing is written', async (t) => {
  const user = await registerUser(app)
  const key = randomUUID()
  t.equal((await postTask(user, key)).statusCode, 201)
  const other = await postTask(user, key, { ...TASK, title: 'Pay the gas bill' })
  t.equal(other.statusCode, 422)
  t.same(json(other), { success: false, error: 'This Idempotency-Key was used for a different request', code: 'IDEMPOTENCY_KEY_REUSED' })
  t.equal(await count(app, 'tasks', user.id), 1)
})

t.test('repeats sent together: one task, every other answer a replay of it or 409 IDEMPOTENCY_KEY_IN_USE', async (t) => {
  const user = await registerUser(app)
  const key = randomUUID()
  const answers = await Promise.all(Array.from({ length: 6 }, () => postTask(user, key)))
  const created = answers.filter((res) => res.statusCode === 201)
  const refused = answers.filter((res) => res.statusCode === 409)
  t.equal(created.length + refused.length, answers.length, `201 or 409 only: ${answers.map((res) => res.statusCode).join(', ')}`)
  t.equal(created.filter((res) => replayed(res) === undefined).length, 1, 'one request carried it out')
  t.equal(new Set(created.map((res) => res.body)).size, 1, 'every 201 is the same answer')
  for (const res of refused) {
    t.same(json(res), { success: false, error: 'A request with this Idempotency-Key is still running', code: 'IDEMPOTENCY_KEY_IN_USE' })
    t.equal(res.headers['retry-after'], '1')
  }
  t.equal(await count(app, 'tasks', user.id), 1, 'one task stored')
  t.equal(await count(app, 'usage_events', user.id), 1)
  const retry = await postTask(user, key)
  t.equal(retry.statusCode, 201)
  t.equal(retry.body, created[0]!.body, 'a later retry gets the stored answer')
})

t.test('different keys sent together each create their task', async (t) => {
  const user = await registerUser(app)
  const answers = await Promise.all(Array.from({ length: 5 }, (_, i) => postTask(user, `key-${i}-${randomUUID()}`, { title: `Task ${i}` })))
  t.same(answers.map((res) => res.statusCode), [201, 201, 201, 201, 201])
  t.equal(await count(app, 'tasks', user.id), 5)
})

t.test('keys are per user: another user\'s request with the same key and body is carried out', async (t) => {
  const [ada, bob] = [await registerUser(app), await registerUser(app)]
  const key = randomUUID()
  const first = await postTask(ada, key)
  const theirs = await postTask(bob, key)
  t.equal(theirs.statusCode, 201)
  t.equal(replayed(theirs), undefined)
  t.not(json(theirs).data.id, json(first).data.id)
  t.equal(await count(app, 'tasks', ada.id), 1)
  t.equal(await count(app, 'tasks', bob.id), 1)
})

t.test('a kept answer lasts 24 hours: after that the key runs the request again, and the housekeeping deletes it', async (t) => {
  const user = await registerUser(app)
  const key = randomUUID()
  const first = await postTask(user, key)
  const ageKeys = (hours: number) => app.db.updateTable('idempotency_keys')
    .set({ created_at: sql`now() - ${`${hours} hours`}::interval` }).where('user_id', '=', user.id).execute()

  await ageKeys(23)
  t.equal(replayed(await postTask(user, key)), 'true', 'still kept after 23 hours')
  await ageKeys(25)
  const later = await postTask(user, key)
  t.equal(later.statusCode, 201)
  t.equal(replayed(later), undefined, 'carried out again after 24 hours')
  t.not(json(later).data.id, json(first).data.id)
  t.equal(await count(app, 'tasks', user.id), 2)
  t.equal(await count(app, 'idempotency_keys', user.id), 1, 'the expired record was replaced in place')
  t.equal(replayed(await postTask(user, key)), 'true', 'and the new answer is kept')

  await ageKeys(25)
  t.ok((await purgeIdempotencyKeys(app.db, app.config.limits.idempotencyKeysPerUser)).expired >= 1)
  t.equal(await count(app, 'idempotency_keys', user.id), 0, 'purged')

  // The scheduler runs that purge (plugins/app/idempotency.ts).
  t.equal(replayed(await postTask(user, key)), undefined)
  await ageKeys(25)
  await app.jobs.runOnce('idempotency.purge')
  t.equal(await count(app, 'idempotency_keys', user.id), 0, 'purged by the scheduled job')
})

t.test('a key is 1 to 255 visible ASCII characters: anything else is a 400 naming the header, and writes nothing', async (t) => {
  const user = await registerUser(app)
  for (const key of ['', 'x'.repeat(256), 'two words', 'caf\u00e9', 'tab\there', 'a, b']) {
    const res = await postTask(user, key)
    t.equal(res.statusCode, 400, JSON.stringify(key))
    t.same(json(res), {
      success: false,
      error: 'Validation failed',
      code: 'VALIDATION_FAILED',
      details: ['Must be 1 to 255 visible ASCII characters, without spaces - idempotency-key']
    }, JSON.stringify(key))
  }
  t.equal(await count(app, 'tasks', user.id), 0)
  const longest = 'k'.repeat(255)
  t.equal((await postTask(user, longest)).statusCode, 201)
  t.equal(replayed(await postTask(user, longest)), 'true')
  const quoted = `"${randomUUID()}"`
  t.equal((await postTask(user, quoted)).statusCode, 201, 'the draft standard\'s quoted form is a key as it is')
  t.equal(replayed(await postTask(user, quoted)), 'true')
})

t.test('a request refused before it runs keeps nothing: its key stays free', async (t) => {
  const user = await registerUser(app)
  const key = randomUUID()
  const invalid = await postTask(user, key, { title: '' })
  t.equal(invalid.statusCode, 400)
  const unauthenticated = await app.inject({ method: 'POST', url: '/tasks', headers: { 'idempotency-key': key }, payload: TASK })
  t.equal(unauthenticated.statusCode, 401)
  t.equal(await count(app, 'idempotency_keys', user.id), 0)
  const valid = await postTask(user, key)
  t.equal(valid.statusCode, 201)
  t.equal(replayed(valid), undefined)
})

t.test('the keys a user keeps are bounded: the housekeeping forgets the oldest first, never one still running', async (t) => {
  const bounded = await build(t, { IDEMPOTENCY_KEYS_PER_USER: '3' })
  const [user, light] = [await registerUser(bounded), await registerUser(bounded)]
  const record = (key: string) => bounded.db.updateTable('idempotency_keys').where('user_id', '=', user.id).where('key', '=', key)
  for (const [i, key] of ['k1', 'k2', 'k3', 'k4', 'k5', 'k6'].entries()) {
    t.equal((await postTask(user, key, { title: `Task ${i}` }, bounded)).statusCode, 201)
    // Distinct creation times, so "oldest" is well defined.
    await record(key).set({ created_at: sql`now() - ${`${10 - i} minutes`}::interval` }).execute()
  }
  // k1 as a request still running elsewhere holds it, k2 as a failed attempt leaves it (free).
  await record('k1').set({ response_status: null, response_body: null, locked_until: sql`now() + interval '1 minute'`, lease_token: 'running' }).execute()
  await record('k2').set({ response_status: null, response_body: null, locked_until: null }).execute()
  for (const key of ['a', 'b', 'c']) await postTask(light, key, { title: key }, bounded)

  t.same(await purgeIdempotencyKeys(bounded.db, bounded.config.limits.idempotencyKeysPerUser), { expired: 0, evicted: 2 })
  const kept = await bounded.db.selectFrom('idempotency_keys').select('key').where('user_id', '=', user.id).orderBy('key').execute()
  t.same(kept.map((row) => row.key), ['k1', 'k4', 'k5', 'k6'], 'the newest three, and the running k1; k2 and k3 forgotten')
  t.equal(await count(bounded, 'idempotency_keys', light.id), 3, 'a user within the bound keeps every key')
  t.equal(replayed(await postTask(user, 'k4', { title: 'Task 3' }, bounded)), 'true', 'a recent key still replays')
  t.equal(replayed(await postTask(user, 'k3', { title: 'Task 2' }, bounded)), undefined, 'a forgotten key runs again')
  t.equal(await count(bounded, 'tasks', user.id), 7)
})

t.test('the OpenAPI document describes the header, the replay header and the 409 and 422 answers', async (t) => {
  const document = app.swagger() as any
  const response = (operation: any, status: string) => {
    const found = operation.responses[status]
    return found.$ref === undefined ? found : document.components.responses[found.$ref.split('/').at(-1)]
  }
  for (const [path, status] of [['/tasks', '201'], ['/checkout', '200'], ['/billing-portal', '200']] as const) {
    const operation = document.paths[path].post
    const header = operation.parameters.find((p: any) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key')
    t.ok(header, `${path}: Idempotency-Key parameter`)
    t.equal(header.required, false)
    t.match(header.schema, { type: 'string', minLength: 1, maxLength: 255 })
    t.match(response(operation, '409').description, /IDEMPOTENCY_KEY_IN_USE/)
    t.match(response(operation, '422').description, /IDEMPOTENCY_KEY_REUSED/)
    t.ok(response(operation, status).headers['idempotent-replayed'], `${path}: Idempotent-Replayed on ${status}`)
  }
  t.match(response(document.paths['/checkout'].post, '409').description, /Conflict with the stored state/, 'checkout\'s own 409 is still described')
  t.same(document.paths['/auth/register'].post.responses['409'], { $ref: '#/components/responses/Conflict' }, 'the shared 409 is unchanged')
  t.equal(document.components.responses.Conflict.description, 'Conflict with the stored state')
  t.notOk(document.paths['/tasks/{id}'].patch.parameters?.some((p: any) => p.in === 'header'), 'other routes do not take the header')
})

t.test('checkout and the billing portal', async (t) => {
  const { app: billing, stripe } = await billingSetup(t)
  const checkout = (user: TestUser, key: string | undefined, payload: Record<string, unknown> = { priceId: PRICE }) =>
    billing.inject({ method: 'POST', url: '/checkout', headers: { ...user.auth, ...(key === undefined ? {} : { 'idempotency-key': key }) }, payload })
  const portal = (user: TestUser, key: string | undefined) =>
    billing.inject({ method: 'POST', url: '/billing-portal', headers: { ...user.auth, ...(key === undefined ? {} : { 'idempotency-key': key }) } })
  const sessionsOf = (user: TestUser) => [...stripe.checkoutSessions.values()].filter((s) => s.client_reference_id === user.id)
  const sessionCalls = () => stripe.calls.filter((c) => c.method === 'POST' && c.path === '/v1/checkout/sessions')

  t.test('a retried checkout makes one session and gets the same answer', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    const first = await checkout(user, key)
    t.equal(first.statusCode, 200)
    const again = await checkout(user, key)
    t.equal(again.statusCode, 200)
    t.equal(again.body, first.body)
    t.equal(replayed(again), 'true')
    t.equal(sessionsOf(user).length, 1, 'one session at the provider')
    t.equal(sessionCalls().length, 1, 'one session call: the replay asks nothing of the provider')
    t.match(sessionCalls()[0]!.idempotencyKey, /^checkout-session-[0-9a-f]{64}$/, 'the provider call carries a key derived from ours')
    t.equal(sessionsOf(user)[0].status, 'open')
    const other = await checkout(user, key, { priceId: 'price_pro_yearly' })
    t.equal(other.statusCode, 422, 'another price with the same key')
    t.equal(sessionCalls().length, 1)
  })

  t.test('a repeat while the first checkout waits on the provider is 409; the first then answers, and a retry replays it', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    const hold = stripe.holdNext({ method: 'POST', path: '/v1/checkout/sessions' })
    const first = checkout(user, key)
    await hold.arrived
    const during = await checkout(user, key)
    t.equal(during.statusCode, 409)
    t.equal(json(during).code, 'IDEMPOTENCY_KEY_IN_USE')
    t.equal(during.headers['retry-after'], '1')
    hold.release()
    const answered = await first
    t.equal(answered.statusCode, 200)
    const after = await checkout(user, key)
    t.equal(after.body, answered.body)
    t.equal(replayed(after), 'true')
    t.equal(sessionsOf(user).length, 1)
  })

  t.test('the first checkout\'s instance died after the provider made the session: the retry gets that session, still open', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    const first = await checkout(user, key)
    t.equal(first.statusCode, 200)
    // As the key is left by an instance killed between the provider's answer and keeping its
    // own: held, no answer, and the lease over.
    const died = () => billing.db.updateTable('idempotency_keys')
      .set({ response_status: null, response_body: null, locked_until: sql`now() - interval '1 second'`, lease_token: 'dead' })
      .where('user_id', '=', user.id).where('key', '=', key).execute()
    await died()
    const retry = await checkout(user, key)
    t.equal(retry.statusCode, 200)
    t.equal(replayed(retry), undefined, 'carried out again')
    t.same(json(retry).data, json(first).data, 'the same session')
    t.equal(sessionsOf(user).length, 1, 'one session at the provider')
    t.equal(sessionsOf(user)[0].status, 'open', 'not expired as if it were an older one')
    t.equal(stripe.calls.filter((c) => c.path.endsWith('/expire')).length, 0)
    t.equal(replayed(await checkout(user, key)), 'true', 'its answer is kept now')

    // Still within the lease: the retry waits for it.
    await billing.db.updateTable('idempotency_keys')
      .set({ response_status: null, response_body: null, locked_until: sql`now() + interval '1 minute'`, lease_token: 'alive' })
      .where('user_id', '=', user.id).where('key', '=', key).execute()
    t.equal((await checkout(user, key)).statusCode, 409)
  })

  t.test('a lease that ends while the first checkout still waits on the provider: the attempt taking over makes no second session', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    const hold = stripe.holdNext({ method: 'POST', path: '/v1/checkout/sessions' })
    const first = checkout(user, key)
    await hold.arrived
    await billing.db.updateTable('idempotency_keys').set({ locked_until: sql`now() - interval '1 second'` })
      .where('user_id', '=', user.id).where('key', '=', key).execute()
    const takeover = await checkout(user, key)
    t.equal(takeover.statusCode, 502, 'the provider refuses the same key while the first call runs')
    t.same(stripe.calls.filter((c) => c.path === '/v1/checkout/sessions').map((c) => c.idempotencyKey),
      [sessionCalls()[0]!.idempotencyKey, sessionCalls()[0]!.idempotencyKey], 'both attempts sent the same provider key')
    hold.release()
    const answered = await first
    t.equal(answered.statusCode, 200, 'the first attempt still answers')
    const retry = await checkout(user, key)
    t.equal(retry.statusCode, 200)
    t.same(json(retry).data, json(answered).data, 'a later retry gets the same session from the provider')
    t.equal(sessionsOf(user).length, 1, 'one session at the provider')
    t.equal(sessionsOf(user)[0].status, 'open')
  })

  t.test('a failed checkout keeps nothing: the key may be used again', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    stripe.failNext(1, 'error', { method: 'POST', path: '/v1/checkout/sessions' })
    const failed = await checkout(user, key)
    t.equal(failed.statusCode, 502)
    const retry = await checkout(user, key)
    t.equal(retry.statusCode, 200)
    t.equal(replayed(retry), undefined)
    t.equal(sessionsOf(user).length, 1)
    const unknownPrice = await checkout(user, `${key}-2`, { priceId: 'price_unknown' })
    t.equal(unknownPrice.statusCode, 400)
    t.equal(await count(billing, 'idempotency_keys', user.id), 2, 'the 400 left its key free (no answer kept)')
    t.equal((await checkout(user, `${key}-2`, { priceId: 'price_pro_yearly' })).statusCode, 200, 'and usable with a corrected body')
  })

  t.test('the billing portal: a retry gets the same session; a 404 keeps nothing; a key is bound to its route', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const key = randomUUID()
    const none = await portal(user, key)
    t.equal(none.statusCode, 404, 'no provider customer yet')
    t.equal((await checkout(user, undefined)).statusCode, 200)
    const first = await portal(user, key)
    t.equal(first.statusCode, 200, 'the key was left free by the 404')
    const again = await portal(user, key)
    t.equal(again.body, first.body)
    t.equal(replayed(again), 'true')
    const portalCalls = stripe.calls.filter((c) => c.path === '/v1/billing_portal/sessions')
    t.equal(portalCalls.length, 1)
    t.match(portalCalls[0]!.idempotencyKey, /^portal-session-[0-9a-f]{64}$/)
    const elsewhere = await checkout(user, key)
    t.equal(elsewhere.statusCode, 422, 'the same key on another route is another request')
  })

  t.test('checkout without a key is unchanged: each one opens a new session and expires the previous', async (t) => {
    const user = await registerUser(billing)
    stripe.reset()
    const a = await checkout(user, undefined)
    const b = await checkout(user, undefined)
    t.not(json(a).data.sessionId, json(b).data.sessionId)
    t.same(sessionsOf(user).map((s) => s.status).sort(), ['expired', 'open'])
    t.equal(await count(billing, 'idempotency_keys', user.id), 0)
  })
})
