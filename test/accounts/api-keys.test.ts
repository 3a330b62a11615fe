// Personal API keys (docs/api-keys.md, auth-extensions §5), tried as a script and as an
// attacker would: a typo'd or forged key (refused before any query), a key outside its
// scopes or on the account's routes, expired, revoked, rotated (within and after its grace),
// after a password reset, past its per-minute limit, found leaked and reported; the key
// shown once and stored only as its hash. Every operation of the OpenAPI document is tried
// with a key. Notices are read off a real SMTP server.
import { createHash, randomUUID } from 'node:crypto'
import { crc32 } from 'node:zlib'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Kysely } from 'kysely'
import { apiKeyReader, isWellFormedApiKey, newApiKey } from '../../accounts/api-keys.js'
import { memoryCounters } from '../../accounts/limits.js'
import type { Database } from '../../db/types.js'
import { ALL_KEY_SCOPES, build, createApiKey, json, randomAddress, registerUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_FROM: 'Task App <no-reply@example.com>', API_KEY_RATE_LIMIT_MAX: '1000' })
const mailTo = (email: string, subject: RegExp) => sink.waitFor((m) => m.to === email && subject.test(m.subject))

const bearer = (credential: string) => ({ authorization: `Bearer ${credential}` })
const request = (on: FastifyInstance, method: string, url: string, headers: Record<string, string>, payload?: unknown, remoteAddress = randomAddress()) =>
  on.inject({ method: method as 'GET', url, headers, remoteAddress, ...(payload !== undefined && { payload: payload as Record<string, unknown> }) })
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')
const eventsOf = async (on: FastifyInstance, userId: string) =>
  (await on.db.selectFrom('security_events').select(['type', 'method']).where('user_id', '=', userId).where('type', 'like', 'api-key%').orderBy('id').execute())

// An implementation of the format apart from the service's, from §5's words: base62 `0-9A-Za-z`,
// the CRC32 of the 47 characters before it, zero-padded to 6.
const B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
function checksumOf (head: string): string {
  let n = crc32(head)
  let out = ''
  while (n > 0) { out = B62[n % 62] + out; n = Math.floor(n / 62) }
  return out.padStart(6, '0')
}

t.test('the form: tsk_, 43 base62 characters of 256 random bits, 6 of CRC32 over the 47 before', async (t) => {
  const keys = Array.from({ length: 2000 }, newApiKey)
  t.equal(new Set(keys).size, keys.length, 'no two alike')
  for (const key of keys.slice(0, 200)) {
    t.match(key, /^tsk_[0-9A-Za-z]{49}$/)
    t.equal(key.slice(47), checksumOf(key.slice(0, 47)), 'the checksum is the CRC32 of what precedes it')
  }
  t.ok(keys.every(isWellFormedApiKey), 'each checks out')
  // 256 bits fill 43 base62 digits: the first digit of a uniform 256-bit number is never above 'F'(15) only by chance.
  const firsts = new Set(keys.map((key) => key[4]))
  t.ok(firsts.size > 10, 'the leading digit varies (not a fixed pad)')
  const key = keys[0]!
  for (const at of [4, 20, 46, 47, 52]) {
    const swapped = key.slice(0, at) + (key[at] === 'a' ? 'b' : 'a') + key.slice(at + 1)
    t.notOk(isWellFormedApiKey(swapped), `one character changed at ${at}: refused`)
  }
  t.notOk(isWellFormedApiKey(key.slice(0, -1)), 'one short')
  t.notOk(isWellFormedApiKey(key + 'A'), 'one long')
  t.notOk(isWellFormedApiKey('tsk_' + '0'.repeat(43) + checksumOf('tsk_' + '0'.repeat(43)).replace(/./, '-')), 'a character outside the alphabet')
  t.ok(isWellFormedApiKey('tsk_' + '0'.repeat(43) + checksumOf('tsk_' + '0'.repeat(43))), 'a forger who knows the form passes the checksum, and meets the database')
})

t.test('a key that fails its checksum is refused before any query; a well-formed one meets the database', async (t) => {
  let touched = 0
  // The app's own database, counting every use of it.
  const counted = new Proxy(app.db, {
    get: (target, property) => {
      touched++
      const value = Reflect.get(target, property)
      return typeof value === 'function' ? value.bind(target) : value
    }
  }) as Kysely<Database>
  const reader = apiKeyReader({ db: counted, counters: memoryCounters(), perMinute: 0 })
  const client = () => ({ address: '10.0.0.1', deviceCookie: undefined })
  const key = newApiKey()
  const typo = key.slice(0, 10) + (key[10] === 'x' ? 'y' : 'x') + key.slice(11)
  await t.rejects(reader.read(typo, client), { code: 'UNAUTHORIZED' })
  await t.rejects(reader.read('tsk_short', client), { code: 'UNAUTHORIZED' })
  t.equal(touched, 0, 'no query for a typo or a forged key')
  await t.rejects(reader.read(key, client), { code: 'UNAUTHORIZED' })
  t.ok(touched > 0, 'the unknown but well-formed key was looked up')

  const res = await request(app, 'GET', '/tasks', bearer(typo))
  t.equal(res.statusCode, 401)
  t.equal(json(res).code, 'UNAUTHORIZED', 'over HTTP: the 401 of any unknown credential')
  t.notOk(res.body.includes(typo), 'the key is not echoed')
})

t.test('made once, stored as its hash, listed without secrets; making one needs a step-up and mails a notice', async (t) => {
  const user = await registerUser(app)
  const { id, key, data } = await createApiKey(app, user, { scopes: ['tasks:read'], expiresAt: new Date(Date.now() + 86_400_000).toISOString() })
  t.equal(data.prefix, key.slice(4, 12), 'the prefix: the 8 characters after tsk_')
  t.same(data.scopes, ['tasks:read'])
  t.equal(data.lastUsedAt, null)
  const row = await app.db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow()
  t.equal(row.key_hash, sha256(key), 'only its SHA-256 is kept')
  t.notOk(Object.values(row).some((value) => typeof value === 'string' && value.includes(key.slice(12))), 'no column holds the key')
  const list = json(await request(app, 'GET', '/account/api-keys', user.auth))
  t.equal(list.data.length, 1)
  t.notOk(JSON.stringify(list).includes(key.slice(12)), 'the list never shows the key')
  t.notOk('key' in list.data[0] || 'keyHash' in list.data[0])
  t.same((await eventsOf(app, user.id)).map((e) => e.type), ['api-key-created'])
  const notice = await mailTo(user.email, /^A new API key was created/)
  t.match(notice.text, /deploy script/)
  t.notOk(notice.text.includes(key.slice(12)), 'the notice names the key, never shows it')

  // A stolen, older session cannot make one.
  await app.db.updateTable('sessions').set({ authenticated_at: new Date(Date.now() - 3_600_000), stepped_up_at: null }).where('user_id', '=', user.id).execute()
  const stale = await request(app, 'POST', '/account/api-keys', user.auth, { name: 'x', scopes: ['tasks:read'] })
  t.equal(stale.statusCode, 403)
  t.equal(json(stale).code, 'STEP_UP_REQUIRED')
  const rotate = await request(app, 'POST', `/account/api-keys/${id}/rotate`, user.auth, {})
  t.equal(json(rotate).code, 'STEP_UP_REQUIRED', 'nor rotate one')
})

t.test('bad requests: unknown scope, no scope, expiry past or beyond a year, unknown fields', async (t) => {
  const user = await registerUser(app)
  const bad = async (body: Record<string, unknown>, what: string) => {
    const res = await request(app, 'POST', '/account/api-keys', user.auth, body)
    t.equal(res.statusCode, 400, what)
    t.equal(json(res).code, 'VALIDATION_FAILED', what)
  }
  await bad({ name: 'k', scopes: ['billing:write'] }, 'a scope that does not exist')
  await bad({ name: 'k', scopes: [] }, 'no scope')
  await bad({ name: '', scopes: ['tasks:read'] }, 'no name')
  await bad({ name: 'k'.repeat(101), scopes: ['tasks:read'] }, 'a name too long')
  await bad({ name: 'k', scopes: ['tasks:read'], expiresAt: new Date(Date.now() - 1000).toISOString() }, 'an expiry past')
  await bad({ name: 'k', scopes: ['tasks:read'], expiresAt: new Date(Date.now() + 400 * 86_400_000).toISOString() }, 'an expiry beyond a year')
  await bad({ name: 'k', scopes: ['tasks:read'], admin: true }, 'an unknown field')
  t.equal((await app.db.selectFrom('api_keys').select('id').where('user_id', '=', user.id).execute()).length, 0, 'nothing was made')
})

t.test('every operation of the OpenAPI document, with a key: allowed within its scopes, 403 outside them or where keys are not taken', async (t) => {
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  const user = await registerUser(app)
  const all = await createApiKey(app, user)
  const operations = Object.entries(doc.paths as Record<string, Record<string, any>>)
    .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => ({ method: method.toUpperCase(), path, op })))
  let keyed = 0
  for (const { method, path, op } of operations) {
    const url = path.replace(/\{[^}]+\}/g, randomUUID())
    const security = op.security as Array<Record<string, string[]>>
    if (security.length === 0) continue // public: no credential is read (a key sent along is ignored)
    const scheme = security.find((s) => 'apiKeyAuth' in s)
    const payload = ['POST', 'PUT', 'PATCH', 'DELETE'].includes(method) ? {} : undefined
    if (scheme === undefined) {
      const res = await request(app, method, url, bearer(all.key), payload)
      t.equal(json(res).code, 'API_KEY_NOT_ALLOWED', `${op.operationId}: a key is not allowed`)
      t.equal(res.statusCode, 403)
      continue
    }
    keyed++
    t.match(path, /^\/(tasks|preferences)/, `${op.operationId}: only tasks and preferences take a key`)
    const needs = scheme.apiKeyAuth!
    t.equal(needs.length, 1, `${op.operationId} names its scope`)
    const allowed = await request(app, method, url, bearer(all.key), payload)
    t.notOk([401, 403].includes(allowed.statusCode), `${op.operationId}: a key with ${needs[0]} gets past authentication (${allowed.statusCode})`)
    const others = ALL_KEY_SCOPES.filter((scope) => !needs.includes(scope))
    const without = await createApiKey(app, user, { scopes: others })
    const refused = await request(app, method, url, bearer(without.key), payload)
    t.equal(refused.statusCode, 403, `${op.operationId}: without ${needs[0]}, 403`)
    t.equal(json(refused).code, 'INSUFFICIENT_SCOPE')
    await request(app, 'DELETE', `/account/api-keys/${without.id}`, user.auth)
  }
  t.equal(keyed, 9, 'six task operations and three of the preferences')
})

t.test('a key reads and writes within its scopes, like the session would', async (t) => {
  const user = await registerUser(app)
  const { key } = await createApiKey(app, user, { scopes: ['tasks:read', 'tasks:write'] })
  const created = await request(app, 'POST', '/tasks', bearer(key), { title: 'from a script' })
  t.equal(created.statusCode, 201)
  const listed = json(await request(app, 'GET', '/tasks', user.auth))
  t.same(listed.data.map((task: { title: string }) => task.title), ['from a script'], 'the task is the owner\'s')
  const prefs = await request(app, 'GET', '/preferences', bearer(key))
  t.equal(json(prefs).code, 'INSUFFICIENT_SCOPE', 'preferences need their own scope')
  const cookie = await app.inject({ method: 'GET', url: '/tasks', cookies: { auth_token: key }, remoteAddress: randomAddress() })
  t.equal(cookie.statusCode, 401, 'a key is read only from the Authorization header, never from the cookie')
})

t.test('lastUsedAt and lastUsedAddress: written on use, at most once a minute', async (t) => {
  const user = await registerUser(app)
  const { id, key } = await createApiKey(app, user)
  await request(app, 'GET', '/tasks', bearer(key), undefined, '10.9.8.7')
  const first = await app.db.selectFrom('api_keys').select(['last_used_at', 'last_used_address']).where('id', '=', id).executeTakeFirstOrThrow()
  t.ok(first.last_used_at !== null)
  t.equal(first.last_used_address, '10.9.8.7')
  await request(app, 'GET', '/tasks', bearer(key), undefined, '10.1.1.1')
  const second = await app.db.selectFrom('api_keys').select(['last_used_at', 'last_used_address']).where('id', '=', id).executeTakeFirstOrThrow()
  t.same(second, first, 'within the minute: not written again')
  await app.db.updateTable('api_keys').set({ last_used_at: new Date(Date.now() - 61_000) }).where('id', '=', id).execute()
  await request(app, 'GET', '/tasks', bearer(key), undefined, '10.1.1.1')
  const listed = json(await request(app, 'GET', '/account/api-keys', user.auth)).data[0]
  t.equal(listed.lastUsedAddress, '10.1.1.1', 'a minute later: written, and listed')
  t.ok(Date.parse(listed.lastUsedAt) > Date.now() - 10_000)
})

t.test('expired, revoked by its owner: 401 from then on; revoking mails and records', async (t) => {
  const user = await registerUser(app)
  const expiring = await createApiKey(app, user)
  await app.db.updateTable('api_keys').set({ expires_at: new Date(Date.now() - 1000) }).where('id', '=', expiring.id).execute()
  t.equal((await request(app, 'GET', '/tasks', bearer(expiring.key))).statusCode, 401, 'expired')
  t.equal(json(await request(app, 'GET', '/account/api-keys', user.auth)).data.length, 0, 'an expired key is not listed')

  const revoked = await createApiKey(app, user)
  t.equal((await request(app, 'GET', '/tasks', bearer(revoked.key))).statusCode, 200)
  const del = await request(app, 'DELETE', `/account/api-keys/${revoked.id}`, user.auth)
  t.equal(del.statusCode, 200)
  t.equal((await request(app, 'GET', '/tasks', bearer(revoked.key))).statusCode, 401, 'revoked')
  t.equal(json(await request(app, 'DELETE', `/account/api-keys/${revoked.id}`, user.auth)).code, 'API_KEY_NOT_FOUND', 'twice: 404')
  const other = await registerUser(app)
  const theirs = await createApiKey(app, other)
  t.equal(json(await request(app, 'DELETE', `/account/api-keys/${theirs.id}`, user.auth)).code, 'API_KEY_NOT_FOUND', 'another user\'s: 404')
  t.equal((await request(app, 'GET', '/tasks', bearer(theirs.key))).statusCode, 200, 'and it still works')
  t.same((await eventsOf(app, user.id)).map((e) => [e.type, e.method]), [['api-key-created', null], ['api-key-created', null], ['api-key-revoked', 'owner']])
  await mailTo(user.email, /^An API key was revoked/)
})

t.test('rotation: a new key, same name and scopes; the old one works through its grace, then dies', async (t) => {
  const user = await registerUser(app)
  const old = await createApiKey(app, user, { scopes: ['tasks:read'] })
  const rotated = await request(app, 'POST', `/account/api-keys/${old.id}/rotate`, user.auth, { graceSeconds: 3600 })
  t.equal(rotated.statusCode, 201)
  const fresh = json(rotated)
  t.not(fresh.key, old.key)
  t.equal(fresh.data.name, 'deploy script')
  t.same(fresh.data.scopes, ['tasks:read'])
  t.equal((await request(app, 'GET', '/tasks', bearer(fresh.key))).statusCode, 200, 'the new key works')
  t.equal((await request(app, 'GET', '/tasks', bearer(old.key))).statusCode, 200, 'the old one, within its grace')
  const listed = json(await request(app, 'GET', '/account/api-keys', user.auth)).data
  const outgoing = listed.find((k: { id: string }) => k.id === old.id)
  t.ok(Math.abs(Date.parse(outgoing.revokesAt) - (Date.now() + 3_600_000)) < 60_000, 'the list says when the grace ends')
  t.equal(json(await request(app, 'POST', `/account/api-keys/${old.id}/rotate`, user.auth, {})).code, 'API_KEY_NOT_FOUND', 'a key rotated already is not rotated again')
  // The grace ends.
  await app.db.updateTable('api_keys').set({ revoked_at: new Date(Date.now() - 1000) }).where('id', '=', old.id).execute()
  t.equal((await request(app, 'GET', '/tasks', bearer(old.key))).statusCode, 401, 'after its grace: 401')
  t.equal((await request(app, 'GET', '/tasks', bearer(fresh.key))).statusCode, 200)

  const again = await request(app, 'POST', `/account/api-keys/${fresh.data.id}/rotate`, user.auth, {})
  t.equal(again.statusCode, 201, 'no graceSeconds: no grace')
  t.equal((await request(app, 'GET', '/tasks', bearer(fresh.key))).statusCode, 401, 'without grace the old key dies at once')
  t.equal(json(await request(app, 'POST', `/account/api-keys/${json(again).data.id}/rotate`, user.auth, { graceSeconds: 86_401 })).code, 'VALIDATION_FAILED', 'a grace over a day')
  await mailTo(user.email, /^An API key was rotated/)
})

t.test('a password reset revokes every key; a password change keeps them; deleting the account deletes them', async (t) => {
  const user = await registerUser(app)
  const kept = await createApiKey(app, user)
  const change = await request(app, 'PATCH', '/account/profile', user.auth, { currentPassword: user.password, newPassword: 'another password 123' })
  t.equal(change.statusCode, 200)
  t.equal((await request(app, 'GET', '/tasks', bearer(kept.key))).statusCode, 200, 'a password change keeps the keys')

  t.equal((await request(app, 'POST', '/auth/password/forgot', {}, { email: user.email })).statusCode, 202)
  const link = await mailTo(user.email, /^Reset your password/)
  const reset = await request(app, 'POST', '/auth/password/reset', {}, { token: link.token!, password: 'a brand new password' })
  t.equal(reset.statusCode, 200)
  t.equal((await request(app, 'GET', '/tasks', bearer(kept.key))).statusCode, 401, 'a reset revokes them')
  t.same((await eventsOf(app, user.id)).map((e) => [e.type, e.method]).slice(-1), [['api-key-revoked', 'password-reset']])
  await mailTo(user.email, /^Your API keys were revoked/)

  const token = json(reset).token as string
  const last = await createApiKey(app, { ...user, auth: bearer(token) })
  t.equal((await request(app, 'DELETE', '/account/delete', bearer(token))).statusCode, 200)
  t.equal((await request(app, 'GET', '/tasks', bearer(last.key))).statusCode, 401)
  t.equal((await app.db.selectFrom('api_keys').select('id').where('user_id', '=', user.id).execute()).length, 0, 'the account\'s keys are gone with it')
})

t.test('at most 20 live keys; a rotation does not need a free place', async (t) => {
  const user = await registerUser(app)
  const made = await Promise.all(Array.from({ length: 20 }, () => createApiKey(app, user)))
  const over = await Promise.all([1, 2].map(() => request(app, 'POST', '/account/api-keys', user.auth, { name: 'one too many', scopes: ['tasks:read'] })))
  t.same(over.map((res) => json(res).code), ['API_KEY_LIMIT_REACHED', 'API_KEY_LIMIT_REACHED'])
  t.equal(over[0]!.statusCode, 409)
  t.equal((await request(app, 'POST', `/account/api-keys/${made[0]!.id}/rotate`, user.auth, { graceSeconds: 60 })).statusCode, 201, 'rotating at 20')
  t.equal((await request(app, 'DELETE', `/account/api-keys/${made[1]!.id}`, user.auth)).statusCode, 200)
  t.equal((await request(app, 'POST', '/account/api-keys', user.auth, { name: 'in its place', scopes: ['tasks:read'] })).statusCode, 201, 'a revoked key frees its place')
})

t.test('a key is not allowed on the account, sign-in and billing routes', async (t) => {
  const user = await registerUser(app)
  const { key } = await createApiKey(app, user)
  for (const [method, url] of [['POST', '/account/api-keys'], ['GET', '/auth/me'], ['POST', '/auth/step-up'], ['POST', '/auth/logout-others'], ['GET', '/subscription']] as const) {
    const res = await request(app, method, url, bearer(key), method === 'POST' ? { password: user.password, name: 'k', scopes: ['tasks:read'] } : undefined)
    t.equal(res.statusCode, 403, `${method} ${url}`)
    t.equal(json(res).code, 'API_KEY_NOT_ALLOWED')
  }
  t.equal((await app.db.selectFrom('api_keys').select('id').where('user_id', '=', user.id).execute()).length, 1, 'a key made no key')
})

t.test('the per-key limit: 429 with Retry-After past API_KEY_RATE_LIMIT_MAX a minute, per key', async (t) => {
  const limited = await build(t, { API_KEY_RATE_LIMIT_MAX: '3' })
  const user = await registerUser(limited)
  const [one, two] = [await createApiKey(limited, user), await createApiKey(limited, user)]
  const address = randomAddress()
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await request(limited, 'GET', '/tasks', bearer(one.key), undefined, address)).statusCode)
  t.same(statuses, [200, 200, 200, 429])
  const over = await request(limited, 'GET', '/tasks', bearer(one.key), undefined, randomAddress())
  t.equal(json(over).code, 'RATE_LIMITED', 'from any address: the count is the key\'s')
  t.ok(Number(over.headers['retry-after']) >= 1 && Number(over.headers['retry-after']) <= 60)
  t.equal((await request(limited, 'GET', '/tasks', bearer(two.key), undefined, address)).statusCode, 200, 'another key has its own')
  t.equal((await request(limited, 'GET', '/tasks', user.auth, undefined, address)).statusCode, 200, 'the session is not limited by it')
})

t.test('POST /api-keys/revoke: whoever finds a key ends it; the answer is always the same', async (t) => {
  const user = await registerUser(app)
  const leaked = await createApiKey(app, user)
  const kept = await createApiKey(app, user)
  const other = await registerUser(app)
  const theirs = await createApiKey(app, other)
  const report = (keys: string[], remoteAddress = randomAddress()) =>
    app.inject({ method: 'POST', url: '/api-keys/revoke', payload: { keys }, remoteAddress })
  const found = await report([leaked.key, 'not a key', newApiKey(), theirs.key])
  t.equal(found.statusCode, 200)
  t.same(json(found), { success: true, data: null })
  const nothing = await report(['garbage', newApiKey()])
  t.same([nothing.statusCode, nothing.body], [found.statusCode, found.body], 'the same answer when nothing was found')
  t.same([(await report([leaked.key])).body], [found.body], 'and for a key already dead')
  t.equal((await request(app, 'GET', '/tasks', bearer(leaked.key))).statusCode, 401, 'the reported key is dead')
  t.equal((await request(app, 'GET', '/tasks', bearer(theirs.key))).statusCode, 401, 'whoever\'s it was')
  t.equal((await request(app, 'GET', '/tasks', bearer(kept.key))).statusCode, 200, 'the owner\'s other key is not')
  t.same((await eventsOf(app, user.id)).map((e) => e.type).slice(-1), ['api-key-reported'])
  t.same((await eventsOf(app, other.id)).map((e) => e.type).slice(-1), ['api-key-reported'])
  const notice = await mailTo(user.email, /^An API key was found exposed/)
  t.match(notice.text, new RegExp(leaked.key.slice(4, 12)), 'the notice names the key by its prefix')
  await mailTo(other.email, /^An API key was found exposed/)

  t.equal((await report(Array.from({ length: 101 }, newApiKey))).statusCode, 400, 'at most 100 keys a report')
})

t.test('POST /api-keys/revoke is limited per client, like the requests that mail someone', async (t) => {
  const limited = await build(t, { AUTH_RATE_LIMIT_MAX: '3' })
  const address = randomAddress()
  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await limited.inject({ method: 'POST', url: '/api-keys/revoke', payload: { keys: [newApiKey()] }, remoteAddress: address })).statusCode)
  t.same(statuses, [200, 200, 200, 429, 429])
  t.equal((await limited.inject({ method: 'POST', url: '/api-keys/revoke', payload: { keys: [newApiKey()] }, remoteAddress: randomAddress() })).statusCode, 200, 'another client is not')
})
