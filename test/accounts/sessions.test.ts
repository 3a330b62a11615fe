// Sessions users can see and end, "sign out everywhere else", and the security-events feed
// (docs/sessions.md): what the owner sees, which tokens stop working, on every instance.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, externalToken, json, registerUser, serverDatabase, sharedApp, testConfig, uniqueEmail } from '../support/helper.js'
import { findUserByEmail } from '../../db/users.js'

const app = await sharedApp()

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const me = (on: FastifyInstance, token: string) => on.inject({ method: 'GET', url: '/auth/me', headers: bearer(token) })

async function logIn (on: FastifyInstance, user: { email: string, password: string }, client: { address: string, agent: string }): Promise<string> {
  const res = await on.inject({
    method: 'POST', url: '/auth/login', remoteAddress: client.address, headers: { 'user-agent': client.agent }, payload: { email: user.email, password: user.password }
  })
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`)
  return json(res).token as string
}

const sessionsOf = async (on: FastifyInstance, token: string) => {
  const res = await on.inject({ method: 'GET', url: '/account/sessions', headers: bearer(token) })
  if (res.statusCode !== 200) throw new Error(`sessions: ${res.statusCode} ${res.body}`)
  return json(res).data as Array<Record<string, any>>
}

const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string

t.test('every sign-in is a session: listed newest first with its method, address and agent, the caller marked', async (t) => {
  const user = await registerUser(app)
  const laptop = await logIn(app, user, { address: '198.51.100.7', agent: 'Laptop Browser/1.0' })
  const phone = await logIn(app, user, { address: '2001:db8::42', agent: 'Phone Browser/2.0' })
  const list = await sessionsOf(app, phone)
  t.same(list.map((s) => s.id), [jtiOf(phone), jtiOf(laptop), jtiOf(user.token)], 'newest first, the registration last')
  t.same(list.map((s) => s.method), ['password', 'password', 'registration'])
  t.same(list.map((s) => s.current), [true, false, false])
  t.match(list[0], { address: '2001:db8::42', userAgent: 'Phone Browser/2.0', provider: null })
  t.match(list[1], { address: '198.51.100.7', userAgent: 'Laptop Browser/1.0' })
  for (const session of list) {
    t.ok(Date.parse(session.createdAt) <= Date.now() && Date.parse(session.lastSeenAt) >= Date.parse(session.createdAt), 'times in order')
  }
  t.same((await sessionsOf(app, laptop)).map((s) => s.current), [false, true, false], 'current follows the token that asks')
})

t.test('a user agent is cut to 512 characters', async (t) => {
  const user = await registerUser(app)
  const token = await logIn(app, user, { address: '198.51.100.8', agent: 'A'.repeat(5000) })
  const [current] = await sessionsOf(app, token)
  t.equal(current!.userAgent, 'A'.repeat(512))
})

t.test('ending a session: its token is 401 from then on; unknown, ended and other users\' sessions are 404', async (t) => {
  const user = await registerUser(app)
  const other = await registerUser(app)
  const laptop = await logIn(app, user, { address: '198.51.100.9', agent: 'Laptop' })
  const end = (token: string, id: string) => app.inject({ method: 'DELETE', url: `/account/sessions/${encodeURIComponent(id)}`, headers: bearer(token) })

  t.equal((await end(other.token, jtiOf(laptop))).statusCode, 404, 'another user cannot end it')
  t.equal((await me(app, laptop)).statusCode, 200, 'and it still works')
  t.same(json(await end(other.token, jtiOf(laptop))), { success: false, error: 'Session not found', code: 'SESSION_NOT_FOUND' })

  const res = await end(user.token, jtiOf(laptop))
  t.equal(res.statusCode, 200)
  t.same(json(res), { success: true, data: null })
  t.notOk([res.headers['set-cookie'] ?? []].flat().some((c) => c.startsWith('auth_token=')), 'another session ending leaves the caller\'s cookie alone')
  t.equal((await me(app, laptop)).statusCode, 401, 'the ended session\'s token is refused')
  t.equal((await me(app, user.token)).statusCode, 200, 'the caller\'s is not')
  t.equal((await end(user.token, jtiOf(laptop))).statusCode, 404, 'an ended session is gone')
  t.equal((await end(user.token, randomUUID())).statusCode, 404, 'an unknown id')
  t.same((await sessionsOf(app, user.token)).map((s) => s.id), [jtiOf(user.token)])

  const self = await end(user.token, jtiOf(user.token))
  t.equal(self.statusCode, 200, 'the current session may end itself')
  t.match([self.headers['set-cookie']].flat().join('\n'), /auth_token=;/, 'and its cookie is cleared')
  t.equal((await me(app, user.token)).statusCode, 401)
})

t.test('sign out everywhere else: every other session and every token signed elsewhere before it end', async (t) => {
  const user = await registerUser(app)
  const laptop = await logIn(app, user, { address: '198.51.100.10', agent: 'Laptop' })
  const phone = await logIn(app, user, { address: '198.51.100.11', agent: 'Phone' })
  const elsewhere = externalToken(app, user)
  t.equal((await me(app, elsewhere)).statusCode, 200, 'a token with only the documented claims works')

  const res = await app.inject({ method: 'POST', url: '/auth/logout-others', headers: { ...bearer(phone), 'content-type': 'application/json' }, payload: '' })
  t.equal(res.statusCode, 200)
  t.same(json(res), { success: true, data: { ended: 2 } }, 'the laptop and the registration')
  t.equal((await me(app, phone)).statusCode, 200, 'the caller stays signed in')
  t.equal((await me(app, laptop)).statusCode, 401)
  t.equal((await me(app, user.token)).statusCode, 401)
  t.equal((await me(app, elsewhere)).statusCode, 401, 'the token signed elsewhere ended too')
  t.same((await sessionsOf(app, phone)).map((s) => s.id), [jtiOf(phone)])

  const later = externalToken(app, user, Math.floor(Date.now() / 1000) + 2)
  t.equal((await me(app, later)).statusCode, 200, 'a token signed elsewhere afterwards works')
})

t.test('a token whose iat is in the future is refused: a fast clock cannot outlive "everywhere else"', async (t) => {
  const user = await registerUser(app)
  const now = Math.floor(Date.now() / 1000)
  t.equal((await me(app, externalToken(app, user, now + 3))).statusCode, 200, 'a few seconds of skew are allowed')
  const ahead = externalToken(app, user, now + 60)
  t.equal((await me(app, ahead)).statusCode, 401, 'a minute ahead is not')
  await app.inject({ method: 'POST', url: '/auth/logout-others', headers: bearer(user.token) })
  t.equal((await me(app, ahead)).statusCode, 401, 'nor after "everywhere else", which its iat would pass')
})

t.test('sign out everywhere else from a token signed elsewhere: it becomes an external session and stays', async (t) => {
  const user = await registerUser(app)
  const elsewhere = externalToken(app, user)
  const res = await app.inject({ method: 'POST', url: '/auth/logout-others', headers: bearer(elsewhere) })
  t.same(json(res), { success: true, data: { ended: 1 } })
  t.equal((await me(app, elsewhere)).statusCode, 200)
  t.equal((await me(app, user.token)).statusCode, 401)
  const [session] = await sessionsOf(app, elsewhere)
  t.match(session, { id: jtiOf(elsewhere), method: 'external', current: true })
})

t.test('sign-out ends the session; a password change ends every session and starts a new one', async (t) => {
  const user = await registerUser(app)
  const laptop = await logIn(app, user, { address: '198.51.100.12', agent: 'Laptop' })
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(laptop) })).statusCode, 200)
  t.same((await sessionsOf(app, user.token)).map((s) => s.id), [jtiOf(user.token)], 'the signed-out session is gone from the list')

  const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: bearer(user.token), payload: { currentPassword: user.password, newPassword: 'a brand new password' } })
  t.equal(change.statusCode, 200)
  const fresh = json(change).token as string
  const list = await sessionsOf(app, fresh)
  t.same(list.map((s) => [s.id, s.method, s.current]), [[jtiOf(fresh), 'password', true]], 'only the new session')
})

t.test('last seen moves at most once a minute', async (t) => {
  const user = await registerUser(app)
  const jti = jtiOf(user.token)
  const lastSeen = async () => (await app.db.selectFrom('sessions').select('last_seen_at').where('id', '=', jti).executeTakeFirstOrThrow()).last_seen_at
  const before = await lastSeen()
  await me(app, user.token)
  t.equal(await lastSeen(), before, 'not within the minute')
  await app.db.updateTable('sessions').set({ last_seen_at: new Date(Date.now() - 120_000) }).where('id', '=', jti).execute()
  const stale = await lastSeen()
  await me(app, user.token)
  const moved = await lastSeen()
  t.ok(Date.parse(moved) > Date.parse(stale) + 100_000, 'a request after a minute moves it to now')
  const [session] = await sessionsOf(app, user.token)
  t.equal(session!.lastSeenAt, moved)
})

t.test('the security-events feed: sign-ins, failures counted per day, changes and ended sessions, newest first, paged', async (t) => {
  const user = await registerUser(app)
  const laptop = await logIn(app, user, { address: '198.51.100.13', agent: 'Laptop' })
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({ method: 'POST', url: '/auth/login', remoteAddress: '203.0.113.5', headers: { 'user-agent': 'Guesser' }, payload: { email: user.email, password: `wrong ${i}` } })
    t.equal(res.statusCode, 401)
  }
  await app.inject({ method: 'DELETE', url: `/account/sessions/${jtiOf(laptop)}`, headers: bearer(user.token) })
  const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: bearer(user.token), payload: { currentPassword: user.password, newPassword: 'another new password' } })
  const token = json(change).token as string

  // The failed sign-ins are counted in the background.
  let events: Array<Record<string, any>> = []
  for (let tries = 0; tries < 100; tries++) {
    events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: bearer(token) })).data
    if (events.some((e) => e.type === 'sign-in-failed' && e.count === 3)) break
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  t.same(events.map((e) => e.type), ['sign-in', 'password-changed', 'session-ended', 'sign-in-failed', 'sign-in', 'sign-in'])
  t.match(events[3], { type: 'sign-in-failed', count: 3, address: '203.0.113.5', userAgent: 'Guesser', method: 'password' })
  t.ok(Date.parse(events[3]!.createdAt) < Date.parse(events[2]!.createdAt), 'at its first failure of the day: later failures do not move it')
  t.match(events[4], { type: 'sign-in', method: 'password', address: '198.51.100.13', userAgent: 'Laptop', count: 1 })
  t.match(events[5], { type: 'sign-in', method: 'registration' })

  const first = json(await app.inject({ method: 'GET', url: '/account/security-events?limit=4', headers: bearer(token) }))
  t.same(first.data.map((e: { id: string }) => e.id), events.slice(0, 4).map((e) => e.id))
  t.equal(first.nextBefore, events[3]!.id)
  // More happens before the next page is read: the pages neither repeat nor skip.
  await app.inject({ method: 'POST', url: '/auth/login', remoteAddress: '203.0.113.5', payload: { email: user.email, password: 'wrong again' } })
  await logIn(app, { email: user.email, password: 'another new password' }, { address: '198.51.100.16', agent: 'Tablet' })
  const second = json(await app.inject({ method: 'GET', url: `/account/security-events?limit=4&before=${first.nextBefore}`, headers: bearer(token) }))
  t.same(second.data.map((e: { id: string }) => e.id), events.slice(4).map((e) => e.id))
  t.notOk('nextBefore' in second, 'the last page says nothing follows')
  const newest = json(await app.inject({ method: 'GET', url: '/account/security-events?limit=1', headers: bearer(token) })).data
  t.match(newest, [{ type: 'sign-in', userAgent: 'Tablet' }], 'the newest first')
  t.equal((await app.inject({ method: 'GET', url: '/account/security-events?before=abc', headers: bearer(token) })).statusCode, 400, 'a cursor is an event id')

  const other = await registerUser(app)
  const theirs = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: bearer(other.token) })).data
  t.same(theirs.map((e: { type: string }) => e.type), ['sign-in'], 'each user sees only their own')
  t.equal((await app.inject({ method: 'GET', url: '/account/security-events?limit=101', headers: bearer(token) })).statusCode, 400)
})

t.test('an ended session is refused by every instance at once', async (t) => {
  // Two instances of the service on one PostgreSQL database, as behind a load balancer.
  const database = await serverDatabase(t, 'sessions')
  const env = async () => ({ DATABASE_URL: database.url.toString(), DATABASE_POOL_MAX: '3' })
  const one = await build(t, {}, await testConfig(t, {}, env))
  const two = await build(t, {}, await testConfig(t, {}, env))
  const user = await registerUser(one, { email: uniqueEmail('fleet') })
  const laptop = await logIn(two, user, { address: '198.51.100.14', agent: 'Laptop' })
  t.equal((await me(two, laptop)).statusCode, 200)
  t.equal((await one.inject({ method: 'DELETE', url: `/account/sessions/${jtiOf(laptop)}`, headers: bearer(user.token) })).statusCode, 200)
  t.equal((await me(two, laptop)).statusCode, 401, 'ended on one, refused by the other on its next request')
  await one.inject({ method: 'POST', url: '/auth/logout-others', headers: bearer(user.token) })
  t.equal((await me(two, user.token)).statusCode, 200)
})

t.test('the purge: sessions whose tokens expired a day ago and events past 90 days go; the rest stays', async (t) => {
  const user = await registerUser(app)
  const ended = await logIn(app, user, { address: '198.51.100.15', agent: 'Old' })
  await app.inject({ method: 'DELETE', url: `/account/sessions/${jtiOf(ended)}`, headers: bearer(user.token) })
  const [expired, justExpired] = [randomUUID(), randomUUID()]
  await app.db.insertInto('sessions').values([
    { id: expired, user_id: user.id, method: 'password', address: null, user_agent: null, expires_at: new Date(Date.now() - 25 * 3600_000) },
    { id: justExpired, user_id: user.id, method: 'password', address: null, user_agent: null, expires_at: new Date(Date.now() - 1000) }
  ]).execute()
  await app.db.insertInto('security_events').values({ user_id: user.id, type: 'sign-in', method: 'password', provider: null, address: null, user_agent: null, created_at: new Date(Date.now() - 91 * 86_400_000).toISOString() }).execute()
  const events = async () => (await app.db.selectFrom('security_events').select('created_at').where('user_id', '=', user.id).execute()).length
  t.equal(await events(), 4, 'registration, sign-in, session ended, and the old one')

  await app.jobs.runOnce('sessions.purge')
  const ids = (await app.db.selectFrom('sessions').select('id').where('user_id', '=', user.id).execute()).map((row) => row.id).sort()
  t.same(ids, [jtiOf(user.token), jtiOf(ended), justExpired].sort(),
    'the one expired a day ago went; the ended one stays while its token could be presented, and one just expired for a day (clocks disagree)')
  t.equal(await events(), 3, 'the event past 90 days went')
  t.equal((await me(app, ended)).statusCode, 401, 'and the ended session\'s token is still refused')
})

t.test('a password sign-in on its way when the password changes starts no session: the change ended it too', async (t) => {
  const user = await registerUser(app)
  // The sign-in read the account and checked the old password...
  const readBefore = await findUserByEmail(app.db, user.email)
  // ...then the owner changed it (a reset alike), ending every session...
  const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'a new password here' } })
  t.equal(change.statusCode, 200)
  const live = async () => Number((await app.db.selectFrom('sessions').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', user.id).where('ended_at', 'is', null).executeTakeFirstOrThrow()).n)
  const before = await live()
  // ...and only then does the sign-in reach the door.
  await t.rejects(app.signIn.complete({ address: '10.9.8.7', deviceCookie: undefined }, readBefore!, { way: 'password' }), { code: 'INVALID_CREDENTIALS' }, 'refused: that password is no longer the account\'s')
  t.equal(await live(), before, 'no session started')
})
