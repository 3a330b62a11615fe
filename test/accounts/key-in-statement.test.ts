// The routes whose own statement checks an API key (`config: { keyInStatement }`,
// plugins/app/authenticate.ts): GET /tasks, POST /tasks and GET /preferences. A key this
// process has read live before is checked there, beside the route's data, in one statement
// (db/api-keys.ts, keyHolder); what the process keeps of it is only what never changes (its
// owner and scopes: accounts/api-keys.ts). So each way a key stops living is tried on a key
// the process knows: the same 401 as everywhere, and a refused POST /tasks stores nothing.
// Its scopes and its per-minute limit are still checked before the statement runs, and a dead
// key over its limit is told it is dead (401), not to wait (429). The statements each request
// ran are read off the traces an OTLP receiver gets.
import { randomUUID } from 'node:crypto'
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import serviceApp from '../../app.js'
import { newApiKey } from '../../accounts/api-keys.js'
import { listTasksForKey } from '../../db/tasks.js'
import { USER_COLUMNS } from '../../db/users.js'
import { serverOptions } from '../../server-options.js'
import { build, createApiKey, json, randomAddress, registerUser, testConfig } from '../support/helper.js'
import { SPAN_KIND, startOtlpReceiver } from '../support/otlp-receiver.js'

const bearer = (credential: string) => ({ authorization: `Bearer ${credential}` })
const send = (on: FastifyInstance, method: 'GET' | 'POST' | 'DELETE', url: string, headers: Record<string, string>, payload?: Record<string, unknown>) =>
  on.inject({ method, url, headers, remoteAddress: randomAddress(), ...(payload !== undefined && { payload }) })

const stored = async (on: FastifyInstance, userId: string) => {
  const tasks = await on.db.selectFrom('tasks').select('id').where('user_id', '=', userId).execute()
  const events = await on.db.selectFrom('usage_events').select('id').where('user_id', '=', userId).where('name', '=', 'task_created').execute()
  return { tasks: tasks.length, events: events.length }
}

/** The three routes with `key`: each answers `status`; a refused POST /tasks stores nothing, a served one one task. */
async function allAnswer (t: Test, on: FastifyInstance, userId: string, key: string, status: 200 | 401, what: string) {
  const before = await stored(on, userId)
  const list = await send(on, 'GET', '/tasks', bearer(key))
  const create = await send(on, 'POST', '/tasks', bearer(key), { title: `by ${what}` })
  const preferences = await send(on, 'GET', '/preferences', bearer(key))
  if (status === 401) {
    for (const [name, res] of [['GET /tasks', list], ['POST /tasks', create], ['GET /preferences', preferences]] as const) {
      t.equal(res.statusCode, 401, `${what}: ${name} is 401`)
      t.same(json(res), { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' }, `${what}: ${name} says only that`)
    }
    t.same(await stored(on, userId), before, `${what}: POST /tasks stored no task and no usage event`)
  } else {
    t.equal(list.statusCode, 200, `${what}: GET /tasks is served`)
    t.equal(create.statusCode, 201, `${what}: POST /tasks is served`)
    t.equal(json(create).data.title, `by ${what}`)
    t.equal(preferences.statusCode, 200, `${what}: GET /preferences is served`)
    t.equal(json(preferences).data.theme, 'system', 'the preferences are the owner\'s (their defaults)')
    t.same(await stored(on, userId), { tasks: before.tasks + 1, events: before.events + 1 }, `${what}: one task and its usage event`)
    t.equal(json(list).total, before.tasks, 'the page is the owner\'s tasks')
  }
}

const app = await build(t, { API_KEY_RATE_LIMIT_MAX: '1000' })

t.test('a known key is served; revoked by its owner, it is 401 at once everywhere and writes nothing', async (t) => {
  const user = await registerUser(app)
  const { id, key } = await createApiKey(app, user)
  await allAnswer(t, app, user.id, key, 200, 'a live key')
  await allAnswer(t, app, user.id, key, 200, 'the same key, known now')
  t.equal((await send(app, 'DELETE', `/account/api-keys/${id}`, user.auth)).statusCode, 200)
  await allAnswer(t, app, user.id, key, 401, 'a revoked key')
})

t.test('expired, rotated without grace, past its grace, reported leaked: 401 at once', async (t) => {
  const user = await registerUser(app)
  const expiring = await createApiKey(app, user)
  await allAnswer(t, app, user.id, expiring.key, 200, 'a key about to expire')
  await app.db.updateTable('api_keys').set({ expires_at: new Date(Date.now() - 1000) }).where('id', '=', expiring.id).execute()
  await allAnswer(t, app, user.id, expiring.key, 401, 'an expired key')

  const rotating = await createApiKey(app, user)
  await allAnswer(t, app, user.id, rotating.key, 200, 'a key before its rotation')
  const rotated = await send(app, 'POST', `/account/api-keys/${rotating.id}/rotate`, user.auth, { graceSeconds: 3600 })
  t.equal(rotated.statusCode, 201)
  await allAnswer(t, app, user.id, rotating.key, 200, 'the old key within its grace')
  await app.db.updateTable('api_keys').set({ revoked_at: new Date(Date.now() - 1000) }).where('id', '=', rotating.id).execute()
  await allAnswer(t, app, user.id, rotating.key, 401, 'the old key after its grace')
  const fresh = json(rotated).key as string
  await allAnswer(t, app, user.id, fresh, 200, 'the new key')
  t.equal((await send(app, 'POST', '/api-keys/revoke', {}, { keys: [fresh] })).statusCode, 200)
  await allAnswer(t, app, user.id, fresh, 401, 'a key reported leaked')
})

t.test('a password reset\'s revocation and a deleted account: 401', async (t) => {
  const user = await registerUser(app)
  const { key } = await createApiKey(app, user)
  await allAnswer(t, app, user.id, key, 200, 'a live key')
  // What a password reset does to the keys (accounts/api-keys.ts, revokeKeysOnReset), without the mail.
  await app.db.updateTable('api_keys').set({ revoked_at: new Date(), revoked_reason: 'password-reset' }).where('user_id', '=', user.id).execute()
  await allAnswer(t, app, user.id, key, 401, 'a key revoked by a reset')

  const other = await registerUser(app)
  const theirs = await createApiKey(app, other)
  await allAnswer(t, app, other.id, theirs.key, 200, 'another account\'s key')
  t.equal((await send(app, 'DELETE', '/account/delete', other.auth)).statusCode, 200)
  await allAnswer(t, app, other.id, theirs.key, 401, 'the key of a deleted account')
})

t.test('a known key outside its scopes: 403 before its statement runs, nothing written; dead, 401', async (t) => {
  const user = await registerUser(app)
  const { id, key } = await createApiKey(app, user, { scopes: ['tasks:read'] })
  t.equal((await send(app, 'GET', '/tasks', bearer(key))).statusCode, 200, 'read within its scope (the key is known now)')
  const before = await stored(app, user.id)
  const create = await send(app, 'POST', '/tasks', bearer(key), { title: 'not allowed' })
  t.equal(create.statusCode, 403)
  t.equal(json(create).code, 'INSUFFICIENT_SCOPE')
  const preferences = await send(app, 'GET', '/preferences', bearer(key))
  t.equal(json(preferences).code, 'INSUFFICIENT_SCOPE', 'the preferences need their own scope')
  t.same(await stored(app, user.id), before, 'no task and no usage event')
  t.equal((await send(app, 'DELETE', `/account/api-keys/${id}`, user.auth)).statusCode, 200)
  const revoked = await send(app, 'POST', '/tasks', bearer(key), { title: 'not allowed' })
  t.equal(revoked.statusCode, 401, 'revoked, outside its scope: 401, as the hook\'s own read answers')
})

t.test('the per-key limit holds for a known key; a dead key over it is 401, not 429', async (t) => {
  const limited = await build(t, { API_KEY_RATE_LIMIT_MAX: '3' })
  const user = await registerUser(limited)
  const { id, key } = await createApiKey(limited, user)
  const before = await stored(limited, user.id)
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await send(limited, 'GET', '/tasks', bearer(key))).statusCode)
  const over = await send(limited, 'POST', '/tasks', bearer(key), { title: 'over the limit' })
  statuses.push(over.statusCode)
  t.same(statuses, [200, 200, 200, 429])
  t.equal(json(over).code, 'RATE_LIMITED')
  t.ok(Number(over.headers['retry-after']) >= 1 && Number(over.headers['retry-after']) <= 60, 'with Retry-After')
  t.same(await stored(limited, user.id), before, 'the refused POST /tasks wrote nothing')
  t.equal((await send(limited, 'DELETE', `/account/api-keys/${id}`, user.auth)).statusCode, 200)
  const dead = await send(limited, 'GET', '/tasks', bearer(key))
  t.equal(dead.statusCode, 401, 'revoked and over its limit: 401')
  t.equal(dead.headers['retry-after'], undefined)
})

t.test('a known key costs one statement: the route\'s, which reads the key beside its data (or, its holder kept, the route\'s alone)', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const traced = await build(t, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, API_KEY_RATE_LIMIT_MAX: '1000' })
  const user = await registerUser(traced)
  const { id, key } = await createApiKey(traced, user)
  // Its first use: the hook reads the key, then the page alone.
  t.equal((await send(traced, 'GET', '/tasks', bearer(key))).statusCode, 200)
  // Known from then on.
  t.equal((await send(traced, 'GET', '/tasks?limit=5', bearer(key))).statusCode, 200)
  t.equal((await send(traced, 'POST', '/tasks', bearer(key), { title: 'traced' })).statusCode, 201)
  t.equal((await send(traced, 'GET', '/preferences', bearer(key))).statusCode, 200)
  // With an Idempotency-Key the hook reads the key, as the stored answer is looked up for its user first.
  t.equal((await send(traced, 'POST', '/tasks', { ...bearer(key), 'idempotency-key': randomUUID() }, { title: 'keyed' })).statusCode, 201)
  // A well-formed key that does not exist is never kept: each request looks it up.
  const madeUp = newApiKey()
  for (let i = 0; i < 2; i++) t.equal((await send(traced, 'GET', '/preferences', bearer(madeUp))).statusCode, 401)
  // Revoked: the page's statement finds it dead, and it is forgotten.
  t.equal((await send(traced, 'DELETE', `/account/api-keys/${id}`, user.auth)).statusCode, 200)
  t.equal((await send(traced, 'GET', '/tasks?limit=6', bearer(key))).statusCode, 401)
  t.equal((await send(traced, 'GET', '/tasks?limit=7', bearer(key))).statusCode, 401)
  await traced.close()

  const statementsOf = (name: string, nth: number) => {
    const server = receiver.spans.filter((span) => span.kind === SPAN_KIND.SERVER && span.name === name)
      .sort((a, b) => Number(a.start - b.start))[nth]!
    return receiver.spans.filter((span) => span.traceId === server.traceId && span.attributes['db.system.name'] === 'postgresql')
      .sort((a, b) => Number(a.start - b.start))
      .map((span) => /^\/\*statement:(\w+)\*\//.exec(String(span.attributes['db.query.text']))?.[1] ?? span.name)
  }
  const [first] = statementsOf('GET /tasks', 0)
  t.equal(first, 'user_for_api_key', 'its first use: the key read by the hook')
  t.same(statementsOf('GET /tasks', 1), ['tasks_page_json_for_key'], 'known: the page with the key\'s check, one statement')
  if (traced.dbEngine === 'postgres') {
    t.same(statementsOf('POST /tasks', 0), ['tasks_create_for_key'], 'a task created with the key\'s check, one statement')
    t.same(statementsOf('GET /preferences', 0), ['preferences_get_for_key'], 'the preferences with the key\'s check, one statement')
  } else {
    // Embedded, the page's statement read the key's holder and the process keeps it
    // (accounts/holder-cache.ts), until a notice of a change to the key or its user.
    t.same(statementsOf('POST /tasks', 0), ['tasks_create'], 'its holder kept: the task created by the route\'s statement alone')
    t.same(statementsOf('GET /preferences', 0), ['preferences_get'], 'and the preferences read alone')
  }
  t.equal(statementsOf('POST /tasks', 1)[0], 'user_for_api_key', 'with an Idempotency-Key: the key read by the hook first')
  t.same(statementsOf('GET /preferences', 1), ['user_for_api_key'], 'a made-up key: looked up')
  t.same(statementsOf('GET /preferences', 2), ['user_for_api_key'], 'and looked up again, never kept')
  t.same(statementsOf('GET /tasks', 2), ['tasks_page_json_for_key'], 'revoked, still known: its statement finds it dead (401)')
  t.same(statementsOf('GET /tasks', 3), ['user_for_api_key'], 'then forgotten: the hook\'s own read (401)')
})

t.test('a keyInStatement route that does not run its statement for a key fails closed: 500, not its data', async (t) => {
  const config = await testConfig(t)
  const own = Fastify(serverOptions(config))
  own.register(fp(serviceApp), { config })
  own.register(async (scope: FastifyInstance) => {
    const forgetful = { scopes: ['tasks:read'], tokenInStatement: true, keyInStatement: true }
    // Answers without request.authenticatedBy.
    scope.get('/forgetful', { config: forgetful }, async () => ({ secret: 'unchecked data' }))
    // Runs it, with no statement for a key.
    scope.get('/keyless', { config: forgetful }, async (request) =>
      ({ secret: await request.authenticatedBy(async () => undefined, async () => 'unchecked data') }))
    // Who the request is, after the page's statement read the key's holder beside the page.
    scope.get('/who', { config: forgetful }, async (request) => {
      await request.authenticatedBy(async () => undefined, async () => undefined, async (key) => {
        const page = await listTasksForKey(scope.db, key, {})
        return page === undefined ? undefined : { holder: page.holder, result: undefined }
      })
      return { user: Object.keys(request.user).sort(), apiKeyId: request.principal.apiKeyId }
    })
  })
  t.teardown(() => own.close())
  await own.ready()
  const user = await registerUser(own)
  const { id, key } = await createApiKey(own, user)
  t.equal((await send(own, 'GET', '/tasks', bearer(key))).statusCode, 200, 'the key read once: known from now on')
  for (const url of ['/forgetful', '/keyless']) {
    const res = await send(own, 'GET', url, bearer(key))
    t.equal(res.statusCode, 500, url)
    t.notMatch(res.body, /unchecked data/)
  }
  const who = await send(own, 'GET', '/who', bearer(key))
  t.equal(who.statusCode, 200)
  t.same(json(who).user, [...USER_COLUMNS].sort(), 'request.user is the user\'s columns alone, not the page\'s beside them')
  t.equal(json(who).apiKeyId, id)
})

t.test('keyInStatement only where a key may go: not on a route without scopes, nor with a step-up', async (t) => {
  const configs: Array<{ scopes?: string[], keyInStatement: boolean, stepUp?: boolean }> = [{ keyInStatement: true }, { scopes: ['tasks:write'], keyInStatement: true, stepUp: true }]
  for (const config of configs) {
    const appConfig = await testConfig(t)
    const own = Fastify(serverOptions(appConfig))
    own.register(fp(serviceApp), { config: appConfig })
    own.register(async (scope: FastifyInstance) => { scope.post('/route', { config }, async () => ({})) })
    t.teardown(() => own.close())
    await t.rejects(async () => { await own.ready() }, /names no scopes|a step-up is checked before the route runs/, JSON.stringify(config))
  }
})
