// Step-up (auth-extensions §6, docs/sessions.md#step-up): what adds a lasting way in needs a
// session that signed in or stepped up within STEP_UP_MAX_AGE_S. One table places every
// operation of the OpenAPI document; the attacks a stolen, older session would try follow.
import { createHmac, randomUUID } from 'node:crypto'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { createUserWithPreferences } from '../../db/users.js'
import { json, randomAddress, registerUser, sharedApp, TEST_SECRET, uniqueEmail } from '../support/helper.js'

const app = await sharedApp()
const MAX_AGE = 600
/** §6 asks a step-up of turning the second factor off too: a stolen session must not strip it. */
const TURNS_OFF_A_FACTOR = 'turns the second factor off (§6: needs a step-up like adding one)'

/**
 * Every operation, placed: `adds a way in` (it must be marked `x-step-up`), or why it is not
 * one. A new route fails this file until it is placed here.
 */
const PLACED: Record<string, 'adds a way in' | string> = {
  startIdentityLink: 'adds a way in',
  enrolTotp: 'adds a way in',
  confirmTotp: 'adds a way in',
  regenerateRecoveryCodes: 'adds a way in',
  passkeyRegistrationOptions: 'adds a way in',
  registerPasskey: 'adds a way in',
  createApiKey: 'adds a way in',
  rotateApiKey: 'adds a way in',
  disableTotp: TURNS_OFF_A_FACTOR,
  completeSecondFactor: 'a sign-in',
  signInWithPasskey: 'a sign-in',
  passkeySignInOptions: 'a sign-in',
  providerCallback: 'completes a link only for the session that began it (startIdentityLink), while that session lives',
  updateProfile: 'a new password or email needs currentPassword, its step-up (§6): the origin dashboard sends it from week-old sessions',
  replaceProfile: 'as updateProfile',
  resetPassword: 'the emailed link proves the inbox; it ends every session and signs in anew',
  confirmDeviceLink: 'lets a device past a sign-in lock; it signs nothing in by itself',
  register: 'a sign-in',
  login: 'a sign-in',
  exchangeSignInCode: 'a sign-in',
  startProviderSignIn: 'a sign-in',
  stepUp: 'proves the session again',
  stepUpOptions: 'proves the session again',
  unlinkIdentity: 'removes a way in',
  deletePasskey: 'removes a way in',
  revokeApiKey: 'removes a way in',
  revokeLeakedApiKeys: 'removes ways in',
  endSession: 'removes a way in',
  logout: 'removes a way in',
  logoutOthers: 'removes ways in',
  deleteAccount: 'removes every way in',
  ...Object.fromEntries([
    'health', 'ready', 'getSecondFactor', 'listSessions', 'listSecurityEvents', 'listIdentities', 'getProfile', 'forgotPassword', 'verifyEmail', 'sendVerificationEmail',
    'requestDeviceLink', 'listProviders', 'getCurrentUser', 'createBillingPortalSession', 'createCheckoutSession', 'getPreferences', 'updatePreferences',
    'replacePreferences', 'getSubscription', 'cancelSubscription', 'listTasks', 'createTask', 'getTask', 'updateTask', 'replaceTask', 'deleteTask',
    'receivePaymentWebhook', 'listPasskeys', 'renamePasskey', 'listApiKeys'
  ].map((id) => [id, 'no sign-in method changes']))
}

const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
/** The session of `token` signed in, and last stepped up, this long ago. */
const age = (on: FastifyInstance, token: string, seconds: number) =>
  on.db.updateTable('sessions').set({ authenticated_at: new Date(Date.now() - seconds * 1000), stepped_up_at: null }).where('id', '=', jtiOf(token)).execute()

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
/** A token signed elsewhere with only the documented claims (docs/api.md, "Tokens"). */
function externalToken (user: { id: string, email: string }, iat: number): string {
  const input = `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url({
    sub: user.id, email: user.email, iss: app.config.http.appUrl, aud: app.config.http.apiUrl, iat, exp: iat + 3600, jti: randomUUID()
  })}`
  return `${input}.${createHmac('sha256', TEST_SECRET).update(input).digest('base64url')}`
}

// A marked route; no provider is configured here, so past the step-up it answers 404 PROVIDER_NOT_FOUND.
const link = (on: FastifyInstance, token: string, headers: Record<string, string> = {}) =>
  on.inject({ method: 'POST', url: '/account/identities/some-provider', headers: { ...bearer(token), ...headers } })
const stepUp = (on: FastifyInstance, token: string, password: string, remoteAddress = randomAddress()) =>
  on.inject({ method: 'POST', url: '/auth/step-up', remoteAddress, headers: bearer(token), payload: { password } })

t.test('the document: every operation placed, each that adds a way in marked x-step-up, each marked one refusing a stale session', async (t) => {
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  const operations = Object.entries(doc.paths as Record<string, Record<string, Record<string, any>>>)
    .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => ({ method, path, op })))
  t.same(operations.map(({ op }) => op.operationId).sort(), Object.keys(PLACED).sort(), 'every operation is placed, and only those')

  const user = await registerUser(app)
  const stale = await registerUser(app)
  await age(app, stale.token, MAX_AGE + 60)
  const oldExternal = externalToken(stale, Math.floor(Date.now() / 1000) - MAX_AGE - 60)
  let marked = 0
  for (const { method, path, op } of operations) {
    const addsAWayIn = PLACED[op.operationId] === 'adds a way in' || PLACED[op.operationId] === TURNS_OFF_A_FACTOR
    t.equal(op['x-step-up'], addsAWayIn ? MAX_AGE : undefined, `${op.operationId}: ${addsAWayIn ? 'marked' : 'not marked'}`)
    if (op['x-step-up'] === undefined) continue
    marked++
    t.ok(op.responses['403'], `${op.operationId} documents its 403`)
    const url = path.replace(/\{[^}]+\}/g, 'x')
    for (const [what, token] of [['a session signed in 11 minutes ago', stale.token], ['a token signed elsewhere 11 minutes ago', oldExternal]] as const) {
      const res = await app.inject({ method: method.toUpperCase() as 'POST', url, headers: bearer(token) })
      t.equal(res.statusCode, 403, `${op.operationId} refuses ${what}`)
      t.same(json(res), {
        success: false, error: 'Confirm it is you first: step up (POST /auth/step-up) or sign in again', code: 'STEP_UP_REQUIRED', stepUp: { methods: ['password'], maxAgeSeconds: MAX_AGE }
      })
    }
    const fresh = await app.inject({ method: method.toUpperCase() as 'POST', url, headers: bearer(user.token) })
    t.not(json(fresh).code, 'STEP_UP_REQUIRED', `${op.operationId} lets a session that just signed in past the step-up`)
  }
  t.equal(marked, 9, 'linking an identity, enrolling, confirming and turning off TOTP, new recovery codes, a passkey\'s options and ' +
    'registration, creating and rotating an API key')
})

t.test('a step-up freshens the session that made it, and no other session of the account', async (t) => {
  const user = await registerUser(app)
  const login = async () => json(await app.inject({ method: 'POST', url: '/auth/login', payload: { email: user.email, password: user.password } })).token as string
  const laptop = await login()
  const phone = await login()
  await age(app, laptop, 3600)
  await age(app, phone, 3600)
  t.equal(json(await link(app, laptop)).code, 'STEP_UP_REQUIRED')

  const res = await stepUp(app, laptop, user.password)
  t.equal(res.statusCode, 200)
  const { steppedUpAt, freshUntil } = json(res).data
  t.equal(Date.parse(freshUntil) - Date.parse(steppedUpAt), MAX_AGE * 1000)
  t.ok(res.cookies.some((c) => c.name === 'sign_in_device'), 'the device is remembered, as at sign-in')
  t.notOk(res.cookies.some((c) => c.name === 'auth_token'), 'the token stays the same')
  t.equal(json(await link(app, laptop)).code, 'PROVIDER_NOT_FOUND', 'the stepped-up session is past the step-up')
  t.equal(json(await link(app, phone)).code, 'STEP_UP_REQUIRED', 'another session of the same account is not')

  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(laptop) })).data as Array<Record<string, any>>
  const byId = new Map(sessions.map((s) => [s.id, s]))
  t.match(byId.get(jtiOf(laptop)), { methods: ['password'], steppedUpAt })
  t.match(byId.get(jtiOf(phone)), { methods: ['password'], steppedUpAt: null })
  t.match(byId.get(jtiOf(user.token)), { method: 'registration', methods: ['password'] })
  const events = json(await app.inject({ method: 'GET', url: '/account/security-events', headers: bearer(laptop) })).data
  t.match(events[0], { type: 'stepped-up', method: 'password' })
})

t.test('a wrong password is refused, counted as a failed sign-in of the account, and locks it like one', async (t) => {
  const limited = await sharedApp({ AUTH_RATE_LIMIT_MAX: '3' })
  const password = 'the owner knows this'
  const registered = await limited.inject({ method: 'POST', url: '/auth/register', remoteAddress: randomAddress(), payload: { email: uniqueEmail('owner'), password } })
  const user = { email: json(registered).user.email as string, password, token: json(registered).token as string }
  await age(limited, user.token, 3600)
  const tries = []
  for (let i = 0; i < 3; i++) tries.push(await stepUp(limited, user.token, `guess ${i}`))
  t.same(tries.map((res) => json(res).code), ['INVALID_CURRENT_PASSWORD', 'INVALID_CURRENT_PASSWORD', 'INVALID_CURRENT_PASSWORD'])
  t.equal(tries[0]!.statusCode, 400, 'not a 401: the session itself is still good')
  t.equal(json(await link(limited, user.token)).code, 'STEP_UP_REQUIRED', 'still stale')
  const locked = await stepUp(limited, user.token, user.password)
  t.equal(locked.statusCode, 429, 'the account is locked: the right password too waits, from a device that never signed in')
  t.equal(json(locked).code, 'ACCOUNT_LOCKED')
  const signIn = await limited.inject({ method: 'POST', url: '/auth/login', remoteAddress: randomAddress(), payload: { email: user.email, password: user.password } })
  t.equal(json(signIn).code, 'ACCOUNT_LOCKED', 'and so is sign-in: the guesses counted against the account')

  let failed: Record<string, any> | undefined
  for (let i = 0; i < 100 && failed?.count !== 3; i++) {
    if (i > 0) await new Promise((resolve) => setTimeout(resolve, 20))
    const events = json(await limited.inject({ method: 'GET', url: '/account/security-events', headers: bearer(user.token) })).data as Array<Record<string, any>>
    failed = events.find((e) => e.type === 'sign-in-failed')
  }
  t.match(failed, { count: 3, method: 'password' }, 'the owner sees them in the feed')
})

t.test('a token signed elsewhere is an external session as of its iat; a step-up makes it a session, the token unchanged', async (t) => {
  const user = await registerUser(app)
  const now = Math.floor(Date.now() / 1000)
  t.equal(json(await link(app, externalToken(user, now - 10))).code, 'PROVIDER_NOT_FOUND', 'signed 10 s ago: fresh')
  const old = externalToken(user, now - MAX_AGE - 1)
  t.equal(json(await link(app, old)).code, 'STEP_UP_REQUIRED', 'signed 601 s ago: stale')
  t.equal((await stepUp(app, old, user.password)).statusCode, 200)
  t.equal(json(await link(app, old)).code, 'PROVIDER_NOT_FOUND', 'the same token, stepped up')
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: bearer(old) })).data as Array<Record<string, any>>
  const adopted = sessions.find((s) => s.id === jtiOf(old))
  t.match(adopted, { method: 'external', methods: ['external'], current: true, steppedUpAt: String })
  t.equal(Date.parse(adopted!.authenticatedAt), (now - MAX_AGE - 1) * 1000, 'authenticated at its iat')
})

t.test('an account without a password: nothing to step up with, a new sign-in is fresh', async (t) => {
  const user = await createUserWithPreferences(app.db, { id: randomUUID(), name: null, email: uniqueEmail('provider-only'), passwordHash: null, emailVerified: true })
  const old = externalToken(user, Math.floor(Date.now() / 1000) - MAX_AGE - 60)
  t.match(json(await link(app, old)), { code: 'STEP_UP_REQUIRED', stepUp: { methods: [], maxAgeSeconds: MAX_AGE } })
  const res = await stepUp(app, old, 'anything')
  t.equal(res.statusCode, 400)
  t.equal(json(res).code, 'PASSWORD_NOT_SET')
})
