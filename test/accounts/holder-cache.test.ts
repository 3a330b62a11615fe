// The token and API key holders the embedded database's process keeps (accounts/holder-cache.ts),
// and what forgets them: the database's notice of every change to a row the check reads
// (db/migrations/2026-11-29T00-00-00_token-holder-notices.ts, 2026-11-30T00-00-00_api-key-holder-notices.ts),
// heard before the change's own answer, and for a key the clock (its expiry, its rotated grace).
// Each way a token or a key stops holding is tried with its holder kept: 401 from the very next
// request. Always on the embedded database; on a PostgreSQL server nothing is kept and no
// notice is sent.
import { sql } from 'kysely'
import pg from 'pg'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { holderCache } from '../../accounts/holder-cache.js'
import type { TokenHolder } from '../../db/users.js'
import { build, createApiKey, embeddedDatabaseEnv, externalToken, json, registerUser, serverDatabase, testConfig, type TestUser } from '../support/helper.js'

const holder = (id: string): TokenHolder => ({
  user: { id, name: null, email: `${id}@example.com`, password: null, image: null, email_verified: null, password_changed_at: null, created_at: '', updated_at: '' },
  session: null,
  earliestSessionlessIat: 0
})

t.test('the cache: kept until a notice names the user; a read under way when one is heard keeps nothing', async (t) => {
  const holders = holderCache()
  holders.keep(holders.ticket(), 'ann', 'a1', holder('ann'))
  holders.keep(holders.ticket(), 'ann', 'a2', holder('ann'))
  holders.keep(holders.ticket(), 'bob', 'b1', holder('bob'))
  t.equal(holders.get('ann', 'a1')?.user.id, 'ann')
  t.equal(holders.get('ann', 'a3'), undefined, 'another token of the same user is not kept')
  holders.changed('ann')
  t.equal(holders.get('ann', 'a1'), undefined, 'a notice for the user forgets every token of theirs')
  t.equal(holders.get('ann', 'a2'), undefined)
  t.equal(holders.get('bob', 'b1')?.user.id, 'bob', 'and no other user\'s')

  const ticket = holders.ticket()
  holders.changed('carol')
  holders.keep(ticket, 'ann', 'a1', holder('ann'))
  t.equal(holders.get('ann', 'a1'), undefined, 'read before a notice (of anyone): it may be older than the change, so it is not kept')
  holders.keep(holders.ticket(), 'ann', 'a1', undefined)
  t.equal(holders.get('ann', 'a1'), undefined, 'no holder (revoked, deleted): nothing kept, so no absence either')

  holders.changed('')
  t.equal(holders.get('bob', 'b1'), undefined, 'the notice of a TRUNCATE forgets everyone')
})

t.test('the cache: a holder past its own time is not served, whatever was heard', async (t) => {
  const until = new Map([['a1', Date.now() + 60_000], ['a2', Date.now() + 1000]])
  const holders = holderCache<TokenHolder & { jti: string }>((kept) => until.get(kept.jti) ?? Infinity)
  for (const jti of ['a1', 'a2', 'a3']) holders.keep(holders.ticket(), 'ann', jti, { ...holder('ann'), jti })
  const now = Date.now
  t.teardown(() => { Date.now = now })
  Date.now = () => now() + 1000
  t.equal(holders.get('ann', 'a1')?.jti, 'a1', 'before its time')
  t.equal(holders.get('ann', 'a2'), undefined, 'at its time: read again')
  t.equal(holders.get('ann', 'a3')?.jti, 'a3', 'no time of its own')
})

t.test('the cache: at most a minute, and at most 10,000 holders, the longest kept going first', async (t) => {
  const holders = holderCache()
  holders.keep(holders.ticket(), 'ann', 'a1', holder('ann'))
  const now = Date.now
  t.teardown(() => { Date.now = now })
  Date.now = () => now() + 60_000
  t.equal(holders.get('ann', 'a1'), undefined, 'a minute on, read again')
  Date.now = now

  for (let i = 0; i < 10_000; i++) holders.keep(holders.ticket(), `user${i}`, 'jti', holder(`user${i}`))
  t.equal(holders.get('user0', 'jti')?.user.id, 'user0', '10,000 kept')
  holders.keep(holders.ticket(), 'one more', 'jti', holder('one more'))
  t.equal(holders.get('user0', 'jti'), undefined, 'the first kept made room')
  t.equal(holders.get('user1', 'jti')?.user.id, 'user1', 'only it')
  t.equal(holders.get('one more', 'jti')?.user.id, 'one more')
})

// The embedded database, also when DATABASE_URL is set.
async function embeddedApp (t: Test): Promise<FastifyInstance> {
  const config = await testConfig(t, {}, embeddedDatabaseEnv)
  return build(t, {}, { ...config, db: { ...config.db, url: undefined } })
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

async function logIn (app: FastifyInstance, user: TestUser): Promise<string> {
  const res = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: user.email, password: user.password } })
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`)
  return json(res).token as string
}

/** Status codes of a read through the hook (GET /tasks), of each route that reads its token in its statement, and of the account. */
async function answers (app: FastifyInstance, token: string): Promise<number[]> {
  const headers = bearer(token)
  return Promise.all([
    app.inject({ method: 'GET', url: '/tasks', headers }),
    app.inject({ method: 'GET', url: '/preferences', headers }),
    app.inject({ method: 'POST', url: '/tasks', headers, payload: { title: 'kept?' } }),
    app.inject({ method: 'GET', url: '/auth/me', headers })
  ].map(async (res) => (await res).statusCode))
}

t.test('embedded: a kept holder is served without reading it again; the notice forgets it', async (t) => {
  const app = await embeddedApp(t)
  const user = await registerUser(app)
  const token = await logIn(app, user)
  t.same(await answers(app, token), [200, 200, 201, 200], 'served, and its holder kept')

  // With the notices off, the database says nothing of a session ended behind the process's
  // back: the kept holder still serves. So it is the notice that makes the next test's 401s
  // immediate, not a read of the holder.
  await sql`set app.token_holder_notices = 'off'`.execute(app.db)
  const jti = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string
  await app.db.updateTable('sessions').set({ ended_at: sql`now()` }).where('id', '=', jti).execute()
  t.same(await answers(app, token), [200, 200, 201, 200], 'served from the kept holder: no query saw the ended session')

  await sql`set app.token_holder_notices = 'on'`.execute(app.db)
  await app.db.updateTable('sessions').set({ ended_at: sql`ended_at` }).where('id', '=', jti).execute()
  t.same(await answers(app, token), [401, 401, 401, 401], 'a notice for the user: read again, and refused')
})

t.test('embedded: each way a token stops holding refuses it from the next request, its holder kept', async (t) => {
  const app = await embeddedApp(t)
  const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string
  const ways: Array<[string, (user: TestUser) => Promise<string>]> = [
    ['signed out (the token replayed)', async (user) => {
      const token = await logIn(app, user)
      await answers(app, token)
      t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 200)
      return token
    }],
    ['its session ended from another browser', async (user) => {
      const token = await logIn(app, user)
      await answers(app, token)
      t.equal((await app.inject({ method: 'DELETE', url: `/account/sessions/${jtiOf(token)}`, headers: user.auth })).statusCode, 200)
      return token
    }],
    ['the password changed', async (user) => {
      const token = await logIn(app, user)
      await answers(app, token)
      const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'a brand new password' } })
      t.equal(change.statusCode, 200)
      return token
    }],
    ['signed elsewhere, then "sign out everywhere else"', async (user) => {
      const token = externalToken(app, user)
      await answers(app, token)
      t.equal((await app.inject({ method: 'POST', url: '/auth/logout-others', headers: user.auth })).statusCode, 200)
      return token
    }],
    ['the account deleted', async (user) => {
      const token = await logIn(app, user)
      await answers(app, token)
      t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })).statusCode, 200)
      return token
    }]
  ]
  for (const [way, stop] of ways) {
    const user = await registerUser(app)
    const token = await stop(user)
    t.same(await answers(app, token), [401, 401, 401, 401], `${way}: 401 on the next request`)
  }
})

/** Status codes of the routes that read a key in their statement: GET /tasks, GET /preferences, POST /tasks. */
async function keyAnswers (app: FastifyInstance, key: string): Promise<number[]> {
  const headers = bearer(key)
  return Promise.all([
    app.inject({ method: 'GET', url: '/tasks', headers }),
    app.inject({ method: 'GET', url: '/preferences', headers }),
    app.inject({ method: 'POST', url: '/tasks', headers, payload: { title: 'kept?' } })
  ].map(async (res) => (await res).statusCode))
}

/** A key used twice: read by the hook, then by a route's statement, which keeps its holder. */
async function keptKey (t: Test, app: FastifyInstance, user: TestUser): Promise<{ id: string, key: string }> {
  const made = await createApiKey(app, user)
  t.same(await keyAnswers(app, made.key), [200, 200, 201], 'a live key is served')
  t.same(await keyAnswers(app, made.key), [200, 200, 201], 'and again, its holder kept')
  return made
}

t.test('embedded: a kept API key holder is served without reading it again; the notice forgets it', async (t) => {
  const app = await embeddedApp(t)
  const user = await registerUser(app)
  const { id, key } = await keptKey(t, app, user)

  // As for a token: with the notices off, a key revoked behind the process's back is still
  // served from its kept holder, so it is the notice that makes the 401s below immediate.
  await sql`set app.token_holder_notices = 'off'`.execute(app.db)
  await app.db.updateTable('api_keys').set({ revoked_at: sql`now()` }).where('id', '=', id).execute()
  t.same(await keyAnswers(app, key), [200, 200, 201], 'served from the kept holder: no query saw the revocation')

  await sql`set app.token_holder_notices = 'on'`.execute(app.db)
  await app.db.updateTable('api_keys').set({ revoked_at: sql`revoked_at` }).where('id', '=', id).execute()
  t.same(await keyAnswers(app, key), [401, 401, 401], 'a notice for the key\'s user: read again, and refused')
})

t.test('embedded: each way a key stops living refuses it from the next request, its holder kept', async (t) => {
  const app = await embeddedApp(t)
  const send = (method: 'POST' | 'DELETE', url: string, headers: Record<string, string>, payload?: object) =>
    app.inject({ method, url, headers, ...(payload !== undefined && { payload }) })
  const ways: Array<[string, (user: TestUser) => Promise<string>]> = [
    ['revoked by its owner', async (user) => {
      const { id, key } = await keptKey(t, app, user)
      t.equal((await send('DELETE', `/account/api-keys/${id}`, user.auth)).statusCode, 200)
      return key
    }],
    ['rotated without grace', async (user) => {
      const { id, key } = await keptKey(t, app, user)
      t.equal((await send('POST', `/account/api-keys/${id}/rotate`, user.auth, {})).statusCode, 201)
      return key
    }],
    ['reported leaked', async (user) => {
      const { key } = await keptKey(t, app, user)
      t.equal((await send('POST', '/api-keys/revoke', {}, { keys: [key] })).statusCode, 200)
      return key
    }],
    ['the account deleted', async (user) => {
      const { key } = await keptKey(t, app, user)
      t.equal((await send('DELETE', '/account/delete', user.auth)).statusCode, 200)
      return key
    }]
  ]
  for (const [way, stop] of ways) {
    const user = await registerUser(app)
    const key = await stop(user)
    t.same(await keyAnswers(app, key), [401, 401, 401], `${way}: 401 on the next request`)
  }
})

t.test('embedded: a kept key stops at its expiry, and at its rotated grace\'s end, with no change to hear', async (t) => {
  const app = await embeddedApp(t)
  const user = await registerUser(app)
  const expiring = await createApiKey(app, user)
  // Two seconds ahead (the change's notice forgets what was kept before it); then kept again.
  await app.db.updateTable('api_keys').set({ expires_at: sql`now() + interval '2 seconds'` }).where('id', '=', expiring.id).execute()
  t.same(await keyAnswers(app, expiring.key), [200, 200, 201], 'before its expiry')
  t.same(await keyAnswers(app, expiring.key), [200, 200, 201], 'kept, before its expiry')

  // Another user's: a change to one of a user's keys forgets every holder of theirs.
  const other = await registerUser(app)
  const rotating = await keptKey(t, app, other)
  const rotated = await app.inject({ method: 'POST', url: `/account/api-keys/${rotating.id}/rotate`, headers: other.auth, payload: { graceSeconds: 2 } })
  t.equal(rotated.statusCode, 201)
  t.same(await keyAnswers(app, rotating.key), [200, 200, 201], 'the old key within its grace')
  t.same(await keyAnswers(app, rotating.key), [200, 200, 201], 'kept, within its grace')

  const ends = await app.db.selectFrom('api_keys').select(['expires_at', 'revoked_at']).where('id', 'in', [expiring.id, rotating.id]).execute()
  const last = Math.max(...ends.map((row) => Date.parse(row.expires_at ?? row.revoked_at!)))
  await new Promise((resolve) => setTimeout(resolve, last - Date.now() + 50))
  t.same(await keyAnswers(app, expiring.key), [401, 401, 401], 'expired: 401, though no row changed since it was kept')
  t.same(await keyAnswers(app, rotating.key), [401, 401, 401], 'past its grace: 401')
  t.same(await keyAnswers(app, json(rotated).key as string), [200, 200, 201], 'the new key is served')
})

t.test('on a PostgreSQL server: nothing kept, no notice sent', async (t) => {
  // A server as a fleet's instances share (DATABASE_URL's, else the local one), whatever this run's database.
  const database = await serverDatabase(t, 'holders')
  const app = await build(t, {}, await testConfig(t, {}, async () => ({ DATABASE_URL: database.url.toString(), DATABASE_POOL_MAX: '3' })))
  t.equal(app.listenToDb, undefined, 'no session to listen on')
  const listener = new pg.Client({ connectionString: database.url.toString() })
  await listener.connect()
  t.teardown(() => listener.end())
  const heard: string[] = []
  listener.on('notification', (message) => heard.push(message.payload ?? ''))
  await listener.query('listen token_holder_changed')
  const user = await registerUser(app)
  const token = await logIn(app, user)
  t.equal((await app.inject({ method: 'POST', url: '/auth/logout', headers: bearer(token) })).statusCode, 200)
  await listener.query('select 1')
  t.same(heard, [], 'a sign-in and a sign-out: no notice')
  t.same(await answers(app, token), [401, 401, 401, 401], 'and the token is refused as ever')
})
