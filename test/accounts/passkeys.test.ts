// Passkeys (docs/passkeys.md, auth-extensions §4 and §6), tried the way an attacker would: a
// presence-only passkey alone, another origin, a bogus signature, a replayed or expired
// challenge, one user's challenge answered for another, a cloned device-bound authenticator
// (its counter standing still), another user's passkey as a second factor, a stale session
// registering one. The answers come from a small software authenticator written here (ES256
// keys from node:crypto, CBOR by hand), so the server's checks run on both databases without
// a browser; test/integration/passkey-browser.test.ts proves the real browser's path.
import { createHash, createPrivateKey, generateKeyPairSync, randomBytes, randomUUID, sign, type KeyObject } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { counterAccepted } from '../../accounts/passkeys.js'
import { build, json, randomAddress, registerUser, verifiedUser, type TestUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { codeAt } from '../support/totp.js'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_FROM: 'Task App <no-reply@example.com>' })
const ORIGIN = new URL(app.config.http.appUrl).origin
const RP_ID = new URL(app.config.http.appUrl).hostname
const mailTo = (email: string, subject: RegExp) => sink.waitFor((m) => m.to === email && subject.test(m.subject))

// ---- a software authenticator -------------------------------------------------------------

/** Just enough CBOR (RFC 8949) for a COSE key and an attestation object. */
function cbor (value: unknown): Buffer {
  const head = (major: number, n: number): Buffer => {
    if (n < 24) return Buffer.from([(major << 5) | n])
    if (n < 256) return Buffer.from([(major << 5) | 24, n])
    if (n < 65536) return Buffer.from([(major << 5) | 25, n >> 8, n & 0xff])
    throw new Error('too long for this encoder')
  }
  if (typeof value === 'number') return value >= 0 ? head(0, value) : head(1, -1 - value)
  if (typeof value === 'string') return Buffer.concat([head(3, Buffer.byteLength(value)), Buffer.from(value)])
  if (value instanceof Uint8Array) return Buffer.concat([head(2, value.length), value])
  if (value instanceof Map) return Buffer.concat([head(5, value.size), ...[...value].flatMap(([k, v]) => [cbor(k), cbor(v)])])
  throw new Error(`cannot encode ${typeof value}`)
}

const b64 = (bytes: Uint8Array | string) => Buffer.from(bytes).toString('base64url')
const sha256 = (data: Uint8Array | string) => createHash('sha256').update(data).digest()
const FLAG = { UP: 0x01, UV: 0x04, BE: 0x08, BS: 0x10, AT: 0x40 }

interface Authenticator {
  credentialId: Buffer
  key: KeyObject
  /** The next counter it will sign (a device-bound authenticator counts up; a synced one reports 0). */
  counter: number
  synced: boolean
  userHandle?: string
}

function newAuthenticator (options: { synced?: boolean, counter?: number } = {}): Authenticator {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  return { credentialId: randomBytes(16), key: privateKey, counter: options.counter ?? 1, synced: options.synced ?? false }
}

function authData (a: Authenticator, flags: number, counter: number, rpId = RP_ID, attested?: Buffer): Buffer {
  const count = Buffer.alloc(4)
  count.writeUInt32BE(counter)
  const backup = a.synced ? FLAG.BE | FLAG.BS : 0
  return Buffer.concat([sha256(rpId), Buffer.from([flags | backup | (attested ? FLAG.AT : 0)]), count, attested ?? Buffer.alloc(0)])
}

function coseKey (a: Authenticator): Buffer {
  const jwk = createPrivateKey(a.key.export({ format: 'pem', type: 'pkcs8' })).export({ format: 'jwk' })
  return cbor(new Map<number, unknown>([[1, 2], [3, -7], [-1, 1], [-2, Buffer.from(jwk.x!, 'base64url')], [-3, Buffer.from(jwk.y!, 'base64url')]]))
}

const clientData = (type: string, challenge: string, origin = ORIGIN) =>
  Buffer.from(JSON.stringify({ type, challenge, origin, crossOrigin: false }))

/** navigator.credentials.create(), as `credential.toJSON()` gives it. */
function attest (a: Authenticator, options: Record<string, any>, { uv = true, origin = ORIGIN } = {}) {
  const length = Buffer.alloc(2)
  length.writeUInt16BE(a.credentialId.length)
  const attested = Buffer.concat([Buffer.alloc(16), length, a.credentialId, coseKey(a)])
  const data = authData(a, FLAG.UP | (uv ? FLAG.UV : 0), 0, options.rp.id, attested)
  a.userHandle = options.user.id
  const attestationObject = cbor(new Map<string, unknown>([['fmt', 'none'], ['attStmt', new Map()], ['authData', data]]))
  return {
    id: b64(a.credentialId),
    rawId: b64(a.credentialId),
    type: 'public-key',
    response: { clientDataJSON: b64(clientData('webauthn.create', options.challenge, origin)), attestationObject: b64(attestationObject), transports: ['internal'] },
    clientExtensionResults: {}
  }
}

/** navigator.credentials.get(): signed with the authenticator's key (or `signWith`), its counter counting up unless synced. */
function assert (a: Authenticator, options: Record<string, any>, opts: { uv?: boolean, origin?: string, counter?: number, signWith?: KeyObject, userHandle?: boolean } = {}) {
  const counter = opts.counter ?? (a.synced ? 0 : a.counter++)
  const data = authData(a, FLAG.UP | (opts.uv === false ? 0 : FLAG.UV), counter, options.rpId)
  const client = clientData('webauthn.get', options.challenge, opts.origin)
  const signature = sign('sha256', Buffer.concat([data, sha256(client)]), opts.signWith ?? a.key)
  return {
    id: b64(a.credentialId),
    rawId: b64(a.credentialId),
    type: 'public-key',
    response: {
      clientDataJSON: b64(client),
      authenticatorData: b64(data),
      signature: b64(signature),
      ...(opts.userHandle !== false && a.userHandle !== undefined && { userHandle: a.userHandle })
    },
    clientExtensionResults: {}
  }
}

// ---- the API, as a web client calls it ----------------------------------------------------

const post = (url: string, payload?: unknown, headers: Record<string, string> = {}, on: FastifyInstance = app) =>
  on.inject({ method: 'POST', url, remoteAddress: randomAddress(), headers, ...(payload !== undefined && { payload: payload as Record<string, unknown> }) })
const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const eventsOf = async (userId: string) =>
  (await app.db.selectFrom('security_events').select(['type', 'method']).where('user_id', '=', userId).orderBy('id').execute())
/** The session of `token` signed in this long ago, never stepped up. */
const age = (token: string, seconds: number) =>
  app.db.updateTable('sessions').set({ authenticated_at: new Date(Date.now() - seconds * 1000), stepped_up_at: null }).where('id', '=', jtiOf(token)).execute()

async function registerPasskey (user: TestUser, a: Authenticator, name = 'Laptop', on: FastifyInstance = app) {
  const options = json(await post('/account/passkeys/options', undefined, user.auth, on)).data
  const res = await post('/account/passkeys', { name, response: attest(a, options) }, user.auth, on)
  if (res.statusCode !== 201) throw new Error(`register: ${res.statusCode} ${res.body}`)
  return json(res).data as Record<string, any>
}
const signInOptions = async (body: Record<string, string> = {}) => json(await post('/auth/passkey/options', body)).data as Record<string, any>
const signIn = (response: unknown) => post('/auth/passkey', { response })

async function userWithPasskey (options: { synced?: boolean, counter?: number } = {}) {
  const user = await verifiedUser(app)
  const authenticator = newAuthenticator(options)
  const passkey = await registerPasskey(user, authenticator)
  return { user, authenticator, passkey }
}

/** A user with TOTP on (and their seed). */
async function withTotp (user: TestUser): Promise<string> {
  const { secret } = json(await post('/account/mfa/totp', { currentPassword: user.password }, user.auth)).data
  const code = codeAt(secret)
  const res = await post('/account/mfa/totp/confirm', { code }, user.auth)
  if (res.statusCode !== 200) throw new Error(`confirm: ${res.body}`)
  return secret
}

// ---- tests --------------------------------------------------------------------------------

t.test('the counter policy (§4)', async (t) => {
  t.ok(counterAccepted(false, 5, 6), 'device-bound, growing')
  t.notOk(counterAccepted(false, 5, 5), 'device-bound, standing still: a clone')
  t.notOk(counterAccepted(false, 5, 4), 'device-bound, going back')
  t.ok(counterAccepted(false, 0, 0), 'no counter at all (0 then 0)')
  t.notOk(counterAccepted(false, 3, 0), 'a counter that fell to 0')
  t.ok(counterAccepted(true, 0, 0), 'synced, reporting 0')
  t.ok(counterAccepted(true, 7, 2), 'synced: no single device keeps its counter')
})

t.test('register: options need a fresh session, the passkey is listed with what the Signal API needs, an event and a notice', async (t) => {
  const user = await verifiedUser(app)
  const optionsRes = await post('/account/passkeys/options', undefined, user.auth)
  t.equal(optionsRes.statusCode, 200)
  const options = json(optionsRes).data
  t.match(options, { rp: { id: RP_ID }, authenticatorSelection: { residentKey: 'preferred', userVerification: 'required' }, excludeCredentials: [] })
  t.equal(Buffer.from(options.user.id, 'base64url').length, 32, 'a random 32-byte user handle, not the account id')
  t.not(options.user.id, user.id)

  const a = newAuthenticator()
  const res = await post('/account/passkeys', { name: 'Work laptop', response: attest(a, options) }, user.auth)
  t.equal(res.statusCode, 201)
  t.match(json(res).data, { name: 'Work laptop', credentialId: b64(a.credentialId), synced: false, deviceBound: true, lastUsedAt: null })
  t.notOk('publicKey' in json(res).data, 'no public key shown')

  const list = json(await app.inject({ method: 'GET', url: '/account/passkeys', headers: user.auth }))
  t.equal(list.userHandle, options.user.id, 'the user handle, for signalAllAcceptedCredentials')
  t.same(list.data.map((p: any) => p.credentialId), [b64(a.credentialId)])
  t.match(await eventsOf(user.id), [{ type: 'sign-in' }, { type: 'passkey-added', method: 'passkey' }])
  const mail = await mailTo(user.email, /new way to sign in/i)
  t.match(mail.text, /A passkey \("Work laptop"\) was added/)

  const again = json(await post('/account/passkeys/options', undefined, user.auth)).data
  t.same(again.excludeCredentials.map((c: any) => c.id), [b64(a.credentialId)], 'the next options exclude it')
  t.equal(again.user.id, options.user.id, 'the same handle every time')
  const twice = await post('/account/passkeys', { name: 'Again', response: attest(a, again) }, user.auth)
  t.equal(twice.statusCode, 409)
  t.equal(json(twice).code, 'PASSKEY_ALREADY_REGISTERED')
})

t.test('registration refused: no user verification, another origin, a used challenge, another session\'s challenge, a stale session', async (t) => {
  const user = await verifiedUser(app)
  const options = async (token = user.token) => json(await post('/account/passkeys/options', undefined, bearer(token))).data
  const register = (response: unknown, token = user.token) => post('/account/passkeys', { name: 'Key', response }, bearer(token))

  const noUv = await register(attest(newAuthenticator(), await options(), { uv: false }))
  t.equal(noUv.statusCode, 400, 'presence only: it could not sign in alone')
  t.equal(json(noUv).code, 'PASSKEY_REJECTED')
  t.equal(json(await register(attest(newAuthenticator(), await options(), { origin: 'https://evil.example' }))).code, 'PASSKEY_REJECTED', 'another origin')

  const opts = await options()
  t.equal((await register(attest(newAuthenticator(), opts))).statusCode, 201)
  t.equal(json(await register(attest(newAuthenticator(), opts))).code, 'PASSKEY_REJECTED', 'its challenge, used again')

  const other = json(await post('/auth/login', { email: user.email, password: user.password })).token as string
  t.equal(json(await register(attest(newAuthenticator(), await options(other)))).code, 'PASSKEY_REJECTED', 'another session\'s challenge')

  const expired = await options()
  await app.db.updateTable('webauthn_challenges').set({ expires_at: new Date(Date.now() - 1000) }).where('used_at', 'is', null).where('user_id', '=', user.id).execute()
  t.equal(json(await register(attest(newAuthenticator(), expired))).code, 'PASSKEY_REJECTED', 'an expired challenge')

  const fresh = await options()
  await age(user.token, 3600)
  const stale = await register(attest(newAuthenticator(), fresh))
  t.equal(stale.statusCode, 403, 'a session that signed in an hour ago cannot register one, options in hand or not')
  t.equal(json(stale).code, 'STEP_UP_REQUIRED')
  t.equal(json(await post('/account/passkeys/options', undefined, user.auth)).code, 'STEP_UP_REQUIRED')
  t.equal(json(await app.inject({ method: 'GET', url: '/account/passkeys', headers: user.auth })).data.length, 1, 'only the one that checked out')
})

t.test('an account waiting for its address\'s owner takes no passkey and no second factor: the registrant keeps no way in past the owner\'s reset', async (t) => {
  // Someone registers the victim's address (a fresh session: step-up passes) and tries to add
  // what a reset would not take away.
  const squatted = await registerUser(app)
  const options = await post('/account/passkeys/options', undefined, squatted.auth)
  t.equal(options.statusCode, 403)
  t.same(json(options), { success: false, error: 'Verify your email address first', code: 'EMAIL_NOT_VERIFIED' })
  const elsewhere = json(await post('/account/passkeys/options', undefined, (await verifiedUser(app)).auth)).data
  const register = await post('/account/passkeys', { name: 'Mine now', response: attest(newAuthenticator(), elsewhere) }, squatted.auth)
  t.equal(json(register).code, 'EMAIL_NOT_VERIFIED', 'nor a registration')
  const totp = await post('/account/mfa/totp', { currentPassword: squatted.password }, squatted.auth)
  t.equal(totp.statusCode, 403)
  t.equal(json(totp).code, 'EMAIL_NOT_VERIFIED', 'nor a TOTP seed (a reset keeps TOTP on: the owner would be locked out)')
  const confirm = await post('/account/mfa/totp/confirm', { code: '123456' }, squatted.auth)
  t.equal(json(confirm).code, 'EMAIL_NOT_VERIFIED')
  const stored = async (table: 'passkeys' | 'totp_factors' | 'webauthn_challenges') =>
    (await app.db.selectFrom(table).select('user_id').where('user_id', '=', squatted.id).execute()).length
  t.same([await stored('passkeys'), await stored('totp_factors'), await stored('webauthn_challenges')], [0, 0, 0], 'nothing stored')

  // Once the address's inbox confirms it, the account's owner adds them.
  const welcome = await mailTo(squatted.email, /^Welcome/)
  t.equal((await post('/auth/email/verify', { token: welcome.token! })).statusCode, 200)
  t.equal((await post('/account/passkeys/options', undefined, squatted.auth)).statusCode, 200, 'a confirmed address: options')
  t.equal((await post('/account/mfa/totp', { currentPassword: squatted.password }, squatted.auth)).statusCode, 200, 'and a seed')
})

t.test('sign in with a passkey alone, discoverable: both factors, no TOTP asked, method passkey', async (t) => {
  const { user, authenticator } = await userWithPasskey()
  await withTotp(user)
  const options = await signInOptions()
  t.notOk('allowCredentials' in options, 'discoverable: no allowCredentials')
  t.equal(options.userVerification, 'required')
  const res = await signIn(assert(authenticator, options))
  t.equal(res.statusCode, 200)
  const body = json(res)
  t.notOk(body.mfaRequired, 'no second factor asked: the passkey with user verification is both')
  t.equal(body.user.id, user.id)
  t.ok(res.cookies.some((c) => c.name === 'auth_token'), 'the auth cookie, as any sign-in')
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(body.token) })).data
  t.match(sessions.find((s: any) => s.current), { method: 'passkey', methods: ['passkey'] })
  const list = json(await app.inject({ method: 'GET', url: '/account/passkeys', headers: bearer(body.token) })).data
  t.ok(list[0].lastUsedAt, 'lastUsedAt set')
  t.match((await eventsOf(user.id)).at(-1), { type: 'sign-in', method: 'passkey' })
})

t.test('sign-in refused: presence only, unknown, another origin, bogus signature, replayed, expired, another user\'s challenge', async (t) => {
  const { user, authenticator: a } = await userWithPasskey()
  const { user: other, authenticator: b } = await userWithPasskey()
  const code = async (res: Promise<{ statusCode: number, json: () => any }>) => { const r = await res; return `${r.statusCode} ${r.json().code}` }

  t.equal(await code(signIn(assert(a, await signInOptions(), { uv: false }))), '401 PASSKEY_USER_VERIFICATION_REQUIRED', 'presence only: not alone')
  t.equal(await code(signIn(assert(newAuthenticator(), await signInOptions()))), '401 PASSKEY_UNKNOWN', 'a passkey no account has')
  t.equal(await code(signIn(assert(a, await signInOptions(), { origin: 'https://evil.example' }))), '401 PASSKEY_INVALID', 'another origin')
  t.equal(await code(signIn(assert(a, await signInOptions(), { signWith: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey }))),
    '401 PASSKEY_INVALID', 'a signature of another key')

  const opts = await signInOptions()
  const answer = assert(a, opts)
  t.equal((await signIn(answer)).statusCode, 200)
  t.equal(await code(signIn(answer)), '401 PASSKEY_INVALID', 'the same answer again: its challenge is used')
  t.equal(await code(signIn(assert(a, opts))), '401 PASSKEY_INVALID', 'a new signature on a used challenge')

  const late = await signInOptions()
  await app.db.updateTable('webauthn_challenges').set({ expires_at: new Date(Date.now() - 1000) }).where('used_at', 'is', null).execute()
  t.equal(await code(signIn(assert(a, late))), '401 PASSKEY_INVALID', 'an expired challenge')

  const forUser = await signInOptions({ email: user.email })
  t.same(forUser.allowCredentials.map((c: any) => c.id), [b64(a.credentialId)], 'by email: that account\'s passkeys')
  t.equal(await code(signIn(assert(b, forUser))), '401 PASSKEY_INVALID', 'one user\'s challenge answered with another\'s passkey')
  t.equal((await signIn(assert(b, await signInOptions({ email: other.email })))).statusCode, 200)

  const mismatched = assert(a, await signInOptions())
  mismatched.response.userHandle = b.userHandle!
  t.equal(await code(signIn(mismatched)), '401 PASSKEY_INVALID', 'a user handle that is not the passkey\'s user')

  // Each failure with the account's passkey is a failed sign-in of that account.
  let failed: any
  for (let i = 0; i < 100 && failed === undefined; i++) {
    if (i > 0) await new Promise((resolve) => setTimeout(resolve, 20))
    failed = (await app.db.selectFrom('security_events').select(['count', 'method']).where('user_id', '=', user.id).where('type', '=', 'sign-in-failed').executeTakeFirst())
  }
  t.match(failed, { method: 'passkey' }, 'recorded in the owner\'s feed')
})

t.test('by email: an address that is no account\'s gets the same shape, stable, and no challenge that signs anyone in', async (t) => {
  const { user } = await userWithPasskey()
  const known = await signInOptions({ email: user.email })
  const unknown = await signInOptions({ email: 'nobody-here@example.com' })
  const unknownAgain = await signInOptions({ email: 'Nobody-Here@example.com ' })
  t.same(Object.keys(unknown).sort(), Object.keys(known).sort())
  t.same(unknown.allowCredentials.map((c: any) => Object.keys(c).sort()), known.allowCredentials.map((c: any) => Object.keys(c).sort()))
  t.equal(unknown.allowCredentials.length, 1)
  t.same(unknownAgain.allowCredentials, unknown.allowCredentials, 'the same made-up credential each time, like a real account')
  t.equal(Buffer.from(unknown.allowCredentials[0].id, 'base64url').length, 16)
  const withoutPasskeys = await verifiedUser(app)
  t.equal((await signInOptions({ email: withoutPasskeys.email })).allowCredentials.length, 1, 'an account without passkeys looks the same')

  // Signing the options of each with one's own passkey, or with one no account has: the same
  // answers, so signing tells no more than the options did; and nobody signs in by an address
  // that is no account's.
  const { user: signer, authenticator: own } = await userWithPasskey()
  const code = async (options: Record<string, any>, a: Authenticator) => { const r = await signIn(assert(a, options)); return `${r.statusCode} ${json(r).code}` }
  for (const [what, email] of [['an account with passkeys', user.email], ['an account without', withoutPasskeys.email], ['no account', 'nobody-here@example.com']] as const) {
    t.equal(await code(await signInOptions({ email }), own), '401 PASSKEY_INVALID', `${what}: one's own passkey is refused`)
    t.equal(await code(await signInOptions({ email }), newAuthenticator()), '401 PASSKEY_UNKNOWN', `${what}: a passkey no account has is unknown`)
  }
  t.equal((await signIn(assert(own, await signInOptions({ email: signer.email })))).statusCode, 200, 'the signer\'s own address signs them in')
})

t.test('counters: a device-bound passkey whose counter stands still is refused and recorded; 0 then 0, and synced ones, are accepted', async (t) => {
  const { user, authenticator: a } = await userWithPasskey()
  t.equal((await signIn(assert(a, await signInOptions(), { counter: 5 }))).statusCode, 200)
  const cloned = await signIn(assert(a, await signInOptions(), { counter: 5 }))
  t.equal(cloned.statusCode, 401, 'the same counter again: a cloned authenticator')
  t.equal(json(cloned).code, 'PASSKEY_INVALID')
  t.equal(json(await signIn(assert(a, await signInOptions(), { counter: 3 }))).code, 'PASSKEY_INVALID', 'a counter that went back')
  t.ok((await eventsOf(user.id)).some((e) => e.type === 'passkey-counter-rejected'), 'a passkey-counter-rejected event')
  const stored = await app.db.selectFrom('passkeys').select('counter').where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(Number(stored.counter), 5, 'the stored counter stays where the genuine one left it')
  t.equal((await signIn(assert(a, await signInOptions(), { counter: 6 }))).statusCode, 200, 'the genuine authenticator goes on')

  const { authenticator: counterless } = await userWithPasskey()
  t.equal((await signIn(assert(counterless, await signInOptions(), { counter: 0 }))).statusCode, 200, 'no counter: 0')
  t.equal((await signIn(assert(counterless, await signInOptions(), { counter: 0 }))).statusCode, 200, 'and 0 again')

  const { authenticator: synced, passkey } = await userWithPasskey({ synced: true })
  t.match(passkey, { synced: true, deviceBound: false })
  t.equal((await signIn(assert(synced, await signInOptions()))).statusCode, 200, 'synced, reporting 0')
  t.equal((await signIn(assert(synced, await signInOptions()))).statusCode, 200, 'and 0 again')
  t.equal((await signIn(assert(synced, await signInOptions(), { counter: 9 }))).statusCode, 200)
  t.equal((await signIn(assert(synced, await signInOptions(), { counter: 2 }))).statusCode, 200, 'a synced counter that went back')
})

t.test('one counter value signs in once, however many requests race with it (compare-and-set)', async (t) => {
  const { user, authenticator: a } = await userWithPasskey()
  const answers = await Promise.all(Array.from({ length: 5 }, async () => assert(a, await signInOptions(), { counter: 7 })))
  const results = await Promise.all(answers.map((answer) => signIn(answer)))
  t.same(results.map((r) => r.statusCode).sort(), [200, 401, 401, 401, 401], 'one sign-in; the others refused')
  const stored = await app.db.selectFrom('passkeys').select('counter').where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(Number(stored.counter), 7)
})

t.test('as the second factor: presence is enough, for that mfaToken\'s user only', async (t) => {
  const { user, authenticator: a } = await userWithPasskey()
  await withTotp(user)
  const { authenticator: b } = await userWithPasskey()
  const mfaToken = async () => {
    const res = json(await post('/auth/login', { email: user.email, password: user.password }))
    t.same(res.methods, ['totp', 'recovery', 'passkey'], 'the challenge offers the passkey')
    return res.mfaToken as string
  }
  const options = async (token: string) => json(await post('/auth/passkey/options', { mfaToken: token })).data

  const token = await mfaToken()
  const opts = await options(token)
  t.same(opts.allowCredentials.map((c: any) => c.id), [b64(a.credentialId)])
  t.equal(opts.userVerification, 'preferred')
  const other = await post('/auth/mfa', { mfaToken: token, passkey: assert(b, opts, { uv: false }) })
  t.equal(other.statusCode, 401, 'another user\'s passkey')
  t.equal(json(other).code, 'PASSKEY_INVALID')

  const token2 = await mfaToken()
  const wrongToken = await post('/auth/mfa', { mfaToken: token2, passkey: assert(a, await options(token), { uv: false }) })
  t.equal(json(wrongToken).code, 'PASSKEY_INVALID', 'options made for another mfaToken')

  const signInChallenge = await post('/auth/mfa', { mfaToken: token2, passkey: assert(a, await signInOptions(), { uv: false }) })
  t.equal(json(signInChallenge).code, 'PASSKEY_INVALID', 'a sign-in\'s challenge is no second factor\'s')

  const res = await post('/auth/mfa', { mfaToken: token2, passkey: assert(a, await options(token2), { uv: false }) })
  t.equal(res.statusCode, 200, 'presence only, after the password')
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(json(res).token) })).data
  t.match(sessions.find((s: any) => s.current), { method: 'password', methods: ['password', 'passkey'] })

  t.equal(json(await post('/auth/passkey/options', { mfaToken: 'not-a-token' })).code, 'MFA_TOKEN_INVALID')
  t.equal((await post('/auth/passkey/options', { mfaToken: token2, email: user.email })).statusCode, 400, 'not both')
  t.equal((await post('/auth/mfa', { mfaToken: token2, code: '123456', passkey: assert(a, opts) })).statusCode, 400, 'one answer at a time')
})

t.test('step-up with a passkey: presence is enough, this session only; a recovery-code session may use it', async (t) => {
  const { user, authenticator: a } = await userWithPasskey()
  await age(user.token, 3600)
  const refused = json(await post('/account/passkeys/options', undefined, user.auth))
  t.match(refused, { code: 'STEP_UP_REQUIRED', stepUp: { methods: ['password', 'passkey'] } })

  const other = json(await post('/auth/login', { email: user.email, password: user.password })).token as string
  const othersOptions = json(await post('/auth/step-up/options', undefined, bearer(other))).data
  const wrongSession = await post('/auth/step-up', { passkey: assert(a, othersOptions, { uv: false }) }, user.auth)
  t.equal(wrongSession.statusCode, 400, 'another session\'s challenge')
  t.equal(json(wrongSession).code, 'PASSKEY_REJECTED')

  const opts = json(await post('/auth/step-up/options', undefined, user.auth)).data
  t.same(opts.allowCredentials.map((c: any) => c.id), [b64(a.credentialId)])
  const res = await post('/auth/step-up', { passkey: assert(a, opts, { uv: false }) }, user.auth)
  t.equal(res.statusCode, 200)
  t.equal((await post('/account/passkeys/options', undefined, user.auth)).statusCode, 200, 'fresh again')
  t.match((await eventsOf(user.id)).filter((e) => e.type === 'stepped-up').at(-1), { method: 'passkey' })

  // A session that signed in with a recovery code steps up with a passkey (never with the password).
  const { recoveryCodes } = await (async () => {
    const { secret } = json(await post('/account/mfa/totp', { currentPassword: user.password }, user.auth)).data
    const code = codeAt(secret)
    return json(await post('/account/mfa/totp/confirm', { code }, user.auth)).data as { recoveryCodes: string[] }
  })()
  const mfaToken = json(await post('/auth/login', { email: user.email, password: user.password })).mfaToken
  const recovered = json(await post('/auth/mfa', { mfaToken, recoveryCode: recoveryCodes[0] })).token as string
  t.match(json(await post('/account/passkeys/options', undefined, bearer(recovered))), { code: 'STEP_UP_REQUIRED', stepUp: { methods: ['totp', 'passkey'] } })
  const recOpts = json(await post('/auth/step-up/options', undefined, bearer(recovered))).data
  t.equal((await post('/auth/step-up', { passkey: assert(a, recOpts, { uv: false }) }, bearer(recovered))).statusCode, 200)
  t.equal((await post('/account/passkeys/options', undefined, bearer(recovered))).statusCode, 200, 'a passkey stepped the recovery session up')
})

t.test('rename and remove: 404 for another user\'s, the last way in kept, an event and a notice', async (t) => {
  const { user, authenticator: a, passkey } = await userWithPasskey()
  const { user: other } = await userWithPasskey()
  const patch = (id: string, name: string, who = user) => app.inject({ method: 'PATCH', url: `/account/passkeys/${id}`, headers: who.auth, payload: { name } })
  const del = (id: string, who = user) => app.inject({ method: 'DELETE', url: `/account/passkeys/${id}`, headers: who.auth })

  t.match(json(await patch(passkey.id, 'Phone')), { success: true, data: { name: 'Phone' } })
  t.equal(json(await patch(passkey.id, 'Mine', other)).code, 'PASSKEY_NOT_FOUND')
  t.equal((await patch(passkey.id, 'x'.repeat(65))).statusCode, 400, 'names are at most 64 characters')
  t.equal((await patch(passkey.id, '   ')).statusCode, 400, 'and not blank')
  t.equal((await del(passkey.id, other)).statusCode, 404)

  // Without a password, the only passkey is the last way in.
  await app.db.updateTable('users').set({ password: null }).where('id', '=', user.id).execute()
  const last = await del(passkey.id)
  t.equal(last.statusCode, 409)
  t.equal(json(last).code, 'LAST_SIGN_IN_METHOD')
  const second = newAuthenticator()
  const added = await registerPasskey(user, second, 'Backup key')
  t.equal((await del(passkey.id)).statusCode, 200, 'with another passkey, it can go')
  t.equal(json(await del(added.id)).code, 'LAST_SIGN_IN_METHOD', 'and now that one is the last')
  t.ok((await eventsOf(user.id)).some((e) => e.type === 'passkey-removed'))
  t.match((await mailTo(user.email, /way to sign in was removed/i)).text, /A passkey \("Phone"\) was removed/)
  t.equal(json(await signIn(assert(a, await signInOptions()))).code, 'PASSKEY_UNKNOWN', 'a removed passkey is unknown: the page tells the browser')
})

t.test('bodies are bounded and strict', async (t) => {
  const user = await verifiedUser(app)
  const options = json(await post('/account/passkeys/options', undefined, user.auth)).data
  const response = attest(newAuthenticator(), options)
  t.equal((await post('/account/passkeys', { name: 'Key', response: { ...response, extra: 1 } }, user.auth)).statusCode, 400, 'unknown fields refused')
  const huge = { ...response, response: { ...response.response, attestationObject: 'A'.repeat(20_000) } }
  t.ok([400, 413].includes((await post('/account/passkeys', { name: 'Key', response: huge }, user.auth)).statusCode), 'an attestation past its cap')
  t.equal((await post('/auth/passkey', { response: { id: 'x' } })).statusCode, 400)
})

t.test('a linked identity and a passkey: each is a way in when the other goes (and unlinking counts passkeys)', async (t) => {
  // A configured provider (never reached: its discovery happens on first use); the identities are written as a link would.
  const withIdp = await build(t, { OIDC_PROVIDERS: 'test', OIDC_TEST_ISSUER: 'https://idp.example.com', OIDC_TEST_CLIENT_ID: 'c', OIDC_TEST_CLIENT_SECRET: 's' })
  const passwordless = async () => {
    const user = await verifiedUser(withIdp)
    const passkey = await registerPasskey(user, newAuthenticator(), 'Only one', withIdp)
    await withIdp.db.updateTable('users').set({ password: null }).where('id', '=', user.id).execute()
    const identityId = randomUUID()
    await withIdp.db.insertInto('user_identities').values({
      id: identityId, user_id: user.id, provider: 'test', issuer: 'https://idp.example.com', subject: randomUUID(), email: user.email, account_email: user.email
    }).execute()
    return { user, passkey, identityId }
  }
  const del = (url: string, user: TestUser) => withIdp.inject({ method: 'DELETE', url, headers: user.auth })

  const a = await passwordless()
  t.equal((await del(`/account/identities/${a.identityId}`, a.user)).statusCode, 200, 'the identity can go: the passkey still signs in')
  t.equal(json(await del(`/account/passkeys/${a.passkey.id}`, a.user)).code, 'LAST_SIGN_IN_METHOD', 'and then the passkey is the last way in')

  const b = await passwordless()
  t.equal((await del(`/account/passkeys/${b.passkey.id}`, b.user)).statusCode, 200, 'the passkey can go: the identity still signs in')
  t.equal(json(await del(`/account/identities/${b.identityId}`, b.user)).code, 'LAST_SIGN_IN_METHOD', 'and then the identity is the last way in')
})

t.test('passkey sign-in attempts count under the sign-in limits, before any query', async (t) => {
  const limited = await build(t, { AUTH_RATE_LIMIT_MAX: '2' })
  // Each answer from one address, its options fetched from addresses of their own.
  const from = randomAddress()
  const attempt = async () => {
    const options = json(await limited.inject({ method: 'POST', url: '/auth/passkey/options', remoteAddress: randomAddress(), payload: {} })).data
    return limited.inject({ method: 'POST', url: '/auth/passkey', remoteAddress: from, payload: { response: assert(newAuthenticator(), options) } })
  }
  t.equal(json(await attempt()).code, 'PASSKEY_UNKNOWN')
  t.equal(json(await attempt()).code, 'PASSKEY_UNKNOWN')
  const third = await attempt()
  t.equal(third.statusCode, 429, 'the third from one address')
  t.equal(json(third).code, 'RATE_LIMITED')
})

t.test('passkey ceremonies started without a session count per client, apart from sign-ins: past the limit no challenge is stored', async (t) => {
  const limited = await build(t, { AUTH_RATE_LIMIT_MAX: '2' })
  const challenges = async () => Number((await limited.db.selectFrom('webauthn_challenges').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n)
  const from = randomAddress()
  const options = (payload: Record<string, string>, remoteAddress = from) =>
    limited.inject({ method: 'POST', url: '/auth/passkey/options', remoteAddress, payload })

  const before = await challenges()
  t.equal((await options({})).statusCode, 200, 'discoverable')
  t.equal((await options({ email: 'someone@example.com' })).statusCode, 200, 'by email')
  const third = await options({})
  t.equal(third.statusCode, 429, 'the third from one address')
  t.equal(json(third).code, 'RATE_LIMITED')
  t.ok(Number(third.headers['retry-after']) > 0, 'with Retry-After')
  t.equal((await options({ email: 'someone@example.com' })).statusCode, 429, 'by email too')
  t.equal(await challenges(), before + 2, 'the refused ones stored no challenge')
  t.equal((await options({}, randomAddress())).statusCode, 200, 'another address has its own count')

  // A second factor's options: counted the same way, before the mfaToken is looked up.
  t.equal(json(await options({ mfaToken: 'not-a-token' })).code, 'RATE_LIMITED', 'an mfaToken from the same address')
  const other = randomAddress()
  t.equal(json(await options({ mfaToken: 'not-a-token' }, other)).code, 'MFA_TOKEN_INVALID')
  t.equal(json(await options({ mfaToken: 'not-a-token' }, other)).code, 'MFA_TOKEN_INVALID')
  t.equal(json(await options({}, other)).code, 'RATE_LIMITED', 'which counted toward the same limit')

  // Sign-ins are counted apart: a client out of ceremonies still signs in with a password.
  const user = await verifiedUser(limited)
  const login = await limited.inject({ method: 'POST', url: '/auth/login', remoteAddress: from, payload: { email: user.email, password: user.password } })
  t.equal(login.statusCode, 200, 'a password sign-in from the same address')
})

t.test('at most 50 passkeys an account', async (t) => {
  const { user } = await userWithPasskey()
  await app.db.insertInto('passkeys').values(Array.from({ length: 49 }, (_, i) => ({
    id: randomUUID(), user_id: user.id, name: `Key ${i}`, credential_id: b64(randomBytes(16)), public_key: b64(randomBytes(65)), backup_eligible: true, backed_up: true
  }))).execute()
  const options = json(await post('/account/passkeys/options', undefined, user.auth)).data
  const res = await post('/account/passkeys', { name: 'One too many', response: attest(newAuthenticator(), options) }, user.auth)
  t.equal(res.statusCode, 409)
  t.equal(json(res).code, 'PASSKEY_LIMIT_REACHED')
  t.equal(json(await app.inject({ method: 'GET', url: '/account/passkeys', headers: user.auth })).data.length, 50, 'the list shows them all')
})

t.test('the options routes take no body', async (t) => {
  t.equal((await app.inject({ method: 'POST', url: '/auth/passkey/options' })).statusCode, 200, 'no body')
  t.equal((await app.inject({ method: 'POST', url: '/auth/passkey/options', payload: {} })).statusCode, 200, '{}')
  const user = await verifiedUser(app)
  t.equal((await app.inject({ method: 'POST', url: '/account/passkeys/options', headers: { ...user.auth, 'content-type': 'application/json' }, payload: '' })).statusCode, 200)
})
