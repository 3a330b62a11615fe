// The routes whose own statement checks the session token (`config: { tokenInStatement }`,
// plugins/app/authenticate.ts): GET /tasks (on a PostgreSQL server), POST /tasks and
// GET /preferences. Each way a token stops holding is tried on each of them: the same 401 as
// every other route gives, and a refused POST /tasks stores nothing (its statement writes only
// for a token that holds: db/users.ts, tokenHolds). A token that holds is served, a session's
// and a sessionless one's alike, so the check in SQL is no stricter either.
import { randomUUID } from 'node:crypto'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import Fastify from 'fastify'
import serviceApp from '../../app.js'
import { serverOptions } from '../../server-options.js'
import { externalToken, json, registerUser, sharedApp, testConfig, type TestUser } from '../support/helper.js'

const app = await sharedApp()

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string

async function logIn (user: TestUser): Promise<string> {
  const res = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: user.email, password: user.password } })
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`)
  return json(res).token as string
}

const stored = async (userId: string) => {
  const tasks = await app.db.selectFrom('tasks').select('title').where('user_id', '=', userId).execute()
  const events = await app.db.selectFrom('usage_events').select('name').where('user_id', '=', userId).where('name', '=', 'task_created').execute()
  return { tasks: tasks.length, events: events.length }
}

/** The three routes with `token`: each answers `status`; a refused POST /tasks stores nothing. */
async function allAnswer (t: Test, userId: string, headers: Record<string, string>, status: 200 | 401, what: string) {
  const before = await stored(userId)
  const list = await app.inject({ method: 'GET', url: '/tasks', headers })
  const create = await app.inject({ method: 'POST', url: '/tasks', headers, payload: { title: `by ${what}` } })
  const preferences = await app.inject({ method: 'GET', url: '/preferences', headers })
  if (status === 401) {
    for (const [name, res] of [['GET /tasks', list], ['POST /tasks', create], ['GET /preferences', preferences]] as const) {
      t.equal(res.statusCode, 401, `${what}: ${name} is 401`)
      t.same(json(res), { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' }, `${what}: ${name} says only that`)
    }
    t.same(await stored(userId), before, `${what}: POST /tasks stored no task and no usage event`)
  } else {
    t.equal(list.statusCode, 200, `${what}: GET /tasks is served`)
    t.equal(create.statusCode, 201, `${what}: POST /tasks is served`)
    t.equal(json(create).data.title, `by ${what}`)
    t.equal(preferences.statusCode, 200, `${what}: GET /preferences is served`)
    t.same(await stored(userId), { tasks: before.tasks + 1, events: before.events + 1 }, `${what}: one task and its usage event`)
    t.ok(json(list).data.every((task: { title: string }) => typeof task.title === 'string'), 'the page is the user\'s tasks')
  }
}

t.test('a session token that holds is served; signed out, it is 401 everywhere and writes nothing', async (t) => {
  const user = await registerUser(app)
  const token = await logIn(user)
  await allAnswer(t, user.id, bearer(token), 200, 'a live session')
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 200)
  await allAnswer(t, user.id, bearer(token), 401, 'a signed-out token (replayed)')
  await allAnswer(t, user.id, user.auth, 200, 'the user\'s other session')
})

t.test('a session ended from another browser: 401 at once', async (t) => {
  const user = await registerUser(app)
  const laptop = await logIn(user)
  const ended = await app.inject({ method: 'DELETE', url: `/account/sessions/${jtiOf(laptop)}`, headers: user.auth })
  t.equal(ended.statusCode, 200)
  await allAnswer(t, user.id, bearer(laptop), 401, 'an ended session')
})

t.test('a password changed since the token was signed: 401', async (t) => {
  const user = await registerUser(app)
  const old = await logIn(user)
  const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'a brand new password' } })
  t.equal(change.statusCode, 200)
  await allAnswer(t, user.id, bearer(old), 401, 'a token from before the password change')
  await allAnswer(t, user.id, bearer(json(change).token as string), 200, 'the token the change gave')
})

t.test('a token signed elsewhere (no session) holds until "sign out everywhere else"', async (t) => {
  const user = await registerUser(app)
  const elsewhere = externalToken(app, user)
  await allAnswer(t, user.id, bearer(elsewhere), 200, 'a token signed elsewhere')
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout-others', headers: user.auth })).statusCode, 200)
  await allAnswer(t, user.id, bearer(elsewhere), 401, 'a token signed elsewhere before "everywhere else"')
  await allAnswer(t, user.id, bearer(externalToken(app, user, Math.floor(Date.now() / 1000) + 2)), 200, 'one signed elsewhere after it')
})

t.test('a deleted user\'s token, a forged one and a revoked one with an Idempotency-Key: 401', async (t) => {
  const user = await registerUser(app)
  const token = await logIn(user)
  const forged = `${token.slice(0, token.lastIndexOf('.'))}.${'A'.repeat(43)}`
  await allAnswer(t, user.id, bearer(forged), 401, 'a forged signature')
  await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })
  const keyed = await app.inject({ method: 'POST', url: '/tasks', headers: { ...bearer(token), 'idempotency-key': randomUUID() }, payload: { title: 'keyed' } })
  t.equal(keyed.statusCode, 401, 'with an Idempotency-Key the hook checks the token, as everywhere')
  await app.db.deleteFrom('users').where('id', '=', user.id).execute()
  await allAnswer(t, user.id, user.auth, 401, 'a deleted user')
})

t.test('the cookie: served from our own origin; a cross-site POST /tasks is 403 and writes nothing', async (t) => {
  const user = await registerUser(app)
  const cookie = { cookie: `auth_token=${user.token}` }
  await allAnswer(t, user.id, cookie, 200, 'the cookie')
  const before = await stored(user.id)
  const crossSite = await app.inject({ method: 'POST', url: '/tasks', headers: { ...cookie, origin: 'https://evil.example' }, payload: { title: 'forged' } })
  t.equal(crossSite.statusCode, 403)
  t.same(await stored(user.id), before, 'nothing stored')
})

t.test('a route that answers without running its work through authenticatedBy fails closed: 500, not its data', async (t) => {
  const config = await testConfig(t)
  const own = Fastify(serverOptions(config))
  own.register(fp(serviceApp), { config })
  own.register(async (scope: FastifyInstance) => {
    scope.get('/forgetful', { config: { tokenInStatement: true } }, async () => ({ secret: 'unchecked data' }))
  })
  t.teardown(() => own.close())
  await own.ready()
  const user = await registerUser(own)
  const res = await own.inject({ method: 'GET', url: '/forgetful', headers: user.auth })
  t.equal(res.statusCode, 500)
  t.notMatch(res.body, /unchecked data/)
  t.equal((await own.inject({ method: 'GET', url: '/forgetful' })).statusCode, 401, 'no credential: 401 as anywhere')
})

t.test('a route cannot ask for its token to be checked in its statement and for a step-up', async (t) => {
  const config = await testConfig(t)
  const own = Fastify(serverOptions(config))
  own.register(fp(serviceApp), { config })
  own.register(async (scope: FastifyInstance) => {
    scope.post('/both', { config: { tokenInStatement: true, stepUp: true } }, async () => ({}))
  })
  t.teardown(() => own.close())
  await t.rejects(async () => { await own.ready() }, /a step-up is checked before the route runs/)
})
