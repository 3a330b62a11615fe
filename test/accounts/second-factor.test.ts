// Two-step sign-in, TOTP with recovery codes (docs/second-factor.md, auth-extensions §3 and
// §6), tried the way an attacker would: the confirming code replayed, a code replayed on another
// challenge, the mfaToken presented as a token, guessed past its tries, after its password
// changed, a stolen recovery-code session adding a way in, ten wrong answers, a reset that
// hopes to skip the factor. Codes are computed here from the secret, as an authenticator app would.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { Secret } from 'otpauth'
import { matchStep } from '../../accounts/totp.js'
import { loadConfig } from '../../config.js'
import { build, json, randomAddress, registerUser, verifiedUser, type TestUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { codeAt, midStep } from '../support/totp.js'
import { hashToken } from '../../token-hash.js'
import { clearSecondFactorFailures, releaseSecondFactorTry, takeSecondFactorTry } from '../../db/second-factor.js'

// Notices are read where users read them: off a real SMTP server.
const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_FROM: 'Task App <no-reply@example.com>' })
const mailTo = (email: string, subject: RegExp) => sink.waitFor((m) => m.to === email && subject.test(m.subject))

/** The TOTP step `ms` falls in. */
const stepOf = (ms: number) => Math.floor(ms / 30_000)

/**
 * As if the time steps used so far had passed: a test that needs a second code within one
 * step (a user could do it 30 s later) forgets the last accepted step instead of waiting.
 */
const stepsPass = (on: FastifyInstance, user: { id: string }) => on.db.updateTable('totp_factors').set({ last_step: null }).where('user_id', '=', user.id).execute()

const post = (on: FastifyInstance, url: string, payload: unknown, headers: Record<string, string> = {}, method: 'POST' | 'DELETE' = 'POST') =>
  on.inject({ method, url, remoteAddress: randomAddress(), headers, payload: payload as Record<string, unknown> })
const login = (on: FastifyInstance, user: TestUser) => post(on, '/auth/login', { email: user.email, password: user.password })
const jtiOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).jti as string
const eventsOf = async (on: FastifyInstance, userId: string) =>
  (await on.db.selectFrom('security_events').select(['type', 'method', 'count']).where('user_id', '=', userId).orderBy('id').execute())

interface Enrolled extends TestUser { secret: string, recoveryCodes: string[] }

/** A user with TOTP on: enrolled and confirmed with the code of the current step (which, then, no sign-in takes). */
async function enrolledUser (on: FastifyInstance = app): Promise<Enrolled> {
  const user = await verifiedUser(on)
  const enrol = await post(on, '/account/mfa/totp', { currentPassword: user.password }, user.auth)
  if (enrol.statusCode !== 200) throw new Error(`enrol: ${enrol.statusCode} ${enrol.body}`)
  const { secret } = json(enrol).data
  const confirm = await post(on, '/account/mfa/totp/confirm', { code: codeAt(secret) }, user.auth)
  if (confirm.statusCode !== 200) throw new Error(`confirm: ${confirm.statusCode} ${confirm.body}`)
  return { ...user, secret, recoveryCodes: json(confirm).data.recoveryCodes }
}

/** The token hashes of the user's sign-ins waiting for their second factor, used or not. */
const challengesOf = async (userId: string) =>
  (await app.db.selectFrom('mfa_challenges').select('token_hash').where('user_id', '=', userId).execute()).map((r) => r.token_hash)

/** The first step of a sign-in: the mfaToken. */
async function challenge (on: FastifyInstance, user: TestUser): Promise<string> {
  const res = await login(on, user)
  if (res.statusCode !== 200 || json(res).mfaRequired !== true) throw new Error(`login: ${res.statusCode} ${res.body}`)
  return json(res).mfaToken
}

t.test('RFC 6238 appendix B (SHA-1): the vectors, cut to 6 digits, match their own step and no other', async (t) => {
  const secret = Secret.fromLatin1('12345678901234567890').base32
  const vectors: Array<[number, string]> = [
    [59, '94287082'], [1111111109, '07081804'], [1111111111, '14050471'], [1234567890, '89005924'], [2000000000, '69279037'], [20000000000, '65353130']
  ]
  for (const [seconds, eight] of vectors) {
    const code = eight.slice(-6)
    t.equal(codeAt(secret, seconds * 1000), code, `T=${seconds}: otpauth computes the RFC's code`)
    t.equal(matchStep(secret, code, seconds * 1000), Math.floor(seconds / 30), `T=${seconds}: accepted, as step ${Math.floor(seconds / 30)}`)
    t.equal(matchStep(secret, code, seconds * 1000 + 90_000), null, `T=${seconds}: refused three steps later`)
  }
  t.equal(matchStep(secret, '287 082', 59_000), 1, 'blanks and hyphens a user types are dropped')
  t.equal(matchStep(secret, '28708', 59_000), null, 'five digits: refused')
  t.equal(matchStep(secret, 'abcdef', 59_000), null, 'not digits: refused')
})

t.test('the window: one step either side is accepted, two are not', async (t) => {
  const secret = Secret.fromLatin1('a seed of twenty by').base32
  const now = 1_800_000_015_000
  for (const offset of [-1, 0, 1]) t.equal(matchStep(secret, codeAt(secret, now + offset * 30_000), now), stepOf(now) + offset, `step ${offset}: accepted`)
  for (const offset of [-2, 2]) t.equal(matchStep(secret, codeAt(secret, now + offset * 30_000), now), null, `step ${offset}: refused`)

  // Through the API: a code of the previous step signs in; one of two steps back does not.
  await midStep()
  const user = await enrolledUser()
  const late = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() - 60_000) })
  t.equal(late.statusCode, 401, 'two steps old: 401')
  t.equal(json(late).code, 'MFA_CODE_INVALID')
  const early = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 60_000) })
  t.equal(json(early).code, 'MFA_CODE_INVALID', 'two steps ahead: 401')
  const next = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(next.statusCode, 200, 'the next step (a clock a little ahead): signed in')
})

t.test('enrol, confirm, sign in with a code; the confirming code and any used code never sign in', async (t) => {
  await midStep()
  const user = await verifiedUser(app)
  t.same(json(await app.inject({ method: 'GET', url: '/account/mfa', headers: user.auth })).data, { totp: 'off', recoveryCodesLeft: 0 })
  const wrongPassword = await post(app, '/account/mfa/totp', { currentPassword: 'not it at all' }, user.auth)
  t.equal(json(wrongPassword).code, 'INVALID_CURRENT_PASSWORD', 'enrolment needs the current password')
  const noPending = await post(app, '/account/mfa/totp/confirm', { code: '123456' }, user.auth)
  t.equal(noPending.statusCode, 409)
  t.equal(json(noPending).code, 'MFA_NOT_PENDING')

  const enrol = await post(app, '/account/mfa/totp', { currentPassword: user.password }, user.auth)
  t.equal(enrol.statusCode, 200)
  const { secret, otpauthUrl } = json(enrol).data
  t.match(secret, /^[A-Z2-7]{32}$/, '160 bits, base32')
  const url = new URL(otpauthUrl)
  t.equal(url.protocol, 'otpauth:')
  t.equal(url.searchParams.get('secret'), secret)
  t.equal(url.searchParams.get('issuer'), new URL(app.config.http.appUrl).host, 'the issuer is APP_URL\'s host')
  t.equal(url.searchParams.get('algorithm'), 'SHA1')
  t.equal(url.searchParams.get('digits'), '6')
  t.equal(url.searchParams.get('period'), '30')
  const stored = await app.db.selectFrom('totp_factors').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.notOk(stored.secret.includes(secret), 'the seed is not stored as it is')
  t.match(stored.secret, /^v1\.[0-9a-f]{8}\./, 'it is sealed')
  t.same(json(await app.inject({ method: 'GET', url: '/account/mfa', headers: user.auth })).data, { totp: 'pending', recoveryCodesLeft: 0 })

  // Pending: sign-in is unchanged.
  t.type(json(await login(app, user)).token, 'string', 'a pending enrolment does not change sign-in')

  const wrong = await post(app, '/account/mfa/totp/confirm', { code: codeAt(secret, Date.now() + 120_000) }, user.auth)
  t.equal(wrong.statusCode, 400)
  t.equal(json(wrong).code, 'MFA_CODE_INCORRECT')
  const confirmingCode = codeAt(secret)
  const confirm = await post(app, '/account/mfa/totp/confirm', { code: confirmingCode }, user.auth)
  t.equal(confirm.statusCode, 200)
  const { recoveryCodes } = json(confirm).data
  t.equal(recoveryCodes.length, 10)
  t.equal(new Set(recoveryCodes).size, 10, 'ten different codes')
  for (const code of recoveryCodes) t.match(code, /^[a-z2-9]{5}-[a-z2-9]{5}$/)
  const rows = await app.db.selectFrom('recovery_codes').select('code_hash').where('user_id', '=', user.id).execute()
  t.equal(rows.length, 10, 'one row each')
  t.notOk(rows.some((row) => recoveryCodes.some((code: string) => row.code_hash.includes(code.replace('-', '')))), 'stored hashed')
  t.same(json(await app.inject({ method: 'GET', url: '/account/mfa', headers: user.auth })).data, { totp: 'on', recoveryCodesLeft: 10 })
  const again = await post(app, '/account/mfa/totp', { currentPassword: user.password }, user.auth)
  t.equal(again.statusCode, 409)
  t.equal(json(again).code, 'MFA_ALREADY_ENABLED')

  const first = await login(app, user)
  t.equal(first.statusCode, 200)
  const body = json(first)
  t.same(Object.keys(body).sort(), ['methods', 'mfaRequired', 'mfaToken', 'success'], 'no token, no user')
  t.same(body.methods, ['totp', 'recovery'])
  t.notOk(first.cookies.some((c) => c.name === 'auth_token'), 'no auth cookie')
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${body.mfaToken}` } })).statusCode, 401, 'the mfaToken is no token')
  t.equal((await app.inject({ method: 'GET', url: '/auth/me', cookies: { auth_token: body.mfaToken } })).statusCode, 401, 'nor a cookie')

  const replayConfirming = await post(app, '/auth/mfa', { mfaToken: body.mfaToken, code: confirmingCode })
  t.equal(replayConfirming.statusCode, 401, 'the code that confirmed the enrolment does not sign in')
  t.equal(json(replayConfirming).code, 'MFA_CODE_INVALID')

  const code = codeAt(secret, Date.now() + 30_000)
  const signedIn = await post(app, '/auth/mfa', { mfaToken: body.mfaToken, code })
  t.equal(signedIn.statusCode, 200)
  const answer = json(signedIn)
  t.equal(answer.user.id, user.id)
  t.notOk('recoveryCodesLeft' in answer, 'recoveryCodesLeft only after a recovery code')
  t.ok(signedIn.cookies.some((c) => c.name === 'auth_token' && c.value === answer.token), 'the auth cookie is set now')
  const me = await app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${answer.token}` } })
  t.equal(me.statusCode, 200)
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: { authorization: `Bearer ${answer.token}` } })).data
  t.same(sessions.find((s: any) => s.current).methods, ['password', 'totp'], 'the session records both factors')

  const reuseToken = await post(app, '/auth/mfa', { mfaToken: body.mfaToken, code: codeAt(secret, Date.now() + 30_000) })
  t.equal(json(reuseToken).code, 'MFA_TOKEN_INVALID', 'an mfaToken signs in once')
  const replay = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code })
  t.equal(replay.statusCode, 401, 'the same code on a new sign-in: refused')
  t.equal(json(replay).code, 'MFA_CODE_INVALID')
  const earlier = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(secret) })
  t.equal(json(earlier).code, 'MFA_CODE_INVALID', 'nor a code of an earlier step than one accepted')

  const types = (await eventsOf(app, user.id)).map((e) => e.type)
  t.ok(types.includes('mfa-enabled'), 'mfa-enabled recorded')
  t.match((await mailTo(user.email, /^A new way to sign in was added/)).text, /Two-step sign-in with an authenticator app was added/, 'the owner is told it is on')
})

t.test('an mfaToken: 5 tries, 5 minutes, bound to the password it followed, the body checked', async (t) => {
  await midStep()
  const user = await enrolledUser()
  const mfaToken = await challenge(app, user)
  for (let i = 0; i < 5; i++) {
    const res = await post(app, '/auth/mfa', { mfaToken, code: '000000' })
    t.equal(json(res).code, 'MFA_CODE_INVALID', `wrong code ${i + 1}`)
  }
  const sixth = await post(app, '/auth/mfa', { mfaToken, code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(sixth.statusCode, 401, 'a sixth answer, even the right one: refused')
  t.equal(json(sixth).code, 'MFA_TOKEN_INVALID')

  const expired = await challenge(app, user)
  await app.db.updateTable('mfa_challenges').set({ expires_at: new Date(Date.now() - 1000) }).where('user_id', '=', user.id).where('tries_left', '=', 5).execute()
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: expired, code: codeAt(user.secret, Date.now() + 30_000) })).code, 'MFA_TOKEN_INVALID', 'expired')

  const beforeChange = await challenge(app, user)
  await midStep()
  const stepUp = await post(app, '/auth/step-up', { code: codeAt(user.secret, Date.now() + 30_000) }, user.auth)
  t.equal(stepUp.statusCode, 200, 'step-up with a code')
  const change = await app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'a new password here' } })
  t.equal(change.statusCode, 200)
  const afterChange = await post(app, '/auth/mfa', { mfaToken: beforeChange, code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(json(afterChange).code, 'MFA_TOKEN_INVALID', 'the password changed since: void')
  // Gone with the change, not only refused after it: an answer racing the change (its token
  // checked just before) then finds no challenge to use, or used it first and its session ended.
  t.same(await challengesOf(user.id), [], 'the change voided every sign-in waiting for a code')

  const changed = { ...user, password: 'a new password here' }
  const beforeLogoutOthers = await challenge(app, changed)
  const signedInElsewhere = json(await post(app, '/auth/mfa', { mfaToken: await challenge(app, changed), recoveryCode: user.recoveryCodes[0] })).token
  t.equal((await post(app, '/auth/logout-others', {}, { authorization: `Bearer ${signedInElsewhere}` })).statusCode, 200)
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: beforeLogoutOthers, recoveryCode: user.recoveryCodes[1] })).code, 'MFA_TOKEN_INVALID', '"sign out everywhere else" ends sign-ins waiting for a code')

  t.equal(json(await post(app, '/auth/mfa', { mfaToken: 'x'.repeat(43), code: '123456' })).code, 'MFA_TOKEN_INVALID', 'unknown')
  const both = await post(app, '/auth/mfa', { mfaToken: 'x', code: '123456', recoveryCode: 'abcde-fghjk' })
  t.equal(both.statusCode, 400, 'a code and a recovery code: 400')
  t.equal((await post(app, '/auth/mfa', { mfaToken: 'x' })).statusCode, 400, 'neither: 400')
  t.equal((await post(app, '/auth/mfa', { mfaToken: 'x', code: '123456', token: 'y' })).statusCode, 400, 'unknown fields refused')
  t.equal((await post(app, '/auth/mfa', { mfaToken: 'x'.repeat(129), code: '123456' })).statusCode, 400, 'bounded')
})

t.test('a recovery code signs in once, normalised, mailed, counted; its session must step up with a code', async (t) => {
  await midStep()
  const user = await enrolledUser()
  const [first, second] = user.recoveryCodes as [string, string]
  const typed = ` ${first.toUpperCase().replace('-', ' ')} `
  const res = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), recoveryCode: typed })
  t.equal(res.statusCode, 200, 'upper case and blanks, no hyphen: accepted')
  const { token, recoveryCodesLeft } = json(res)
  t.equal(recoveryCodesLeft, 9)
  const again = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), recoveryCode: first })
  t.equal(json(again).code, 'MFA_CODE_INVALID', 'a recovery code works once')
  t.match((await mailTo(user.email, /^A recovery code was used/)).text, /You have 9 left/, 'the owner is mailed, with how many are left')
  t.ok((await eventsOf(app, user.id)).some((e) => e.type === 'recovery-code-used'), 'recorded')
  t.same(json(await app.inject({ method: 'GET', url: '/account/mfa', headers: { authorization: `Bearer ${token}` } })).data.recoveryCodesLeft, 9)

  // A fresh sign-in, but with a recovery code: nothing that adds a way in until a TOTP step-up.
  const auth = { authorization: `Bearer ${token}` }
  const regenerate = await post(app, '/account/mfa/recovery-codes', { currentPassword: user.password, code: codeAt(user.secret, Date.now() + 30_000) }, auth)
  t.equal(regenerate.statusCode, 403, 'a recovery-code session is not a step-up')
  t.same(json(regenerate).stepUp, { methods: ['totp'], maxAgeSeconds: 600 }, 'only a code steps it up')
  const withPassword = await post(app, '/auth/step-up', { password: user.password }, auth)
  t.equal(withPassword.statusCode, 403, 'the password does not step it up')
  t.equal(json(withPassword).code, 'STEP_UP_REQUIRED')
  const withRecovery = await post(app, '/auth/step-up', { recoveryCode: second }, auth)
  t.equal(withRecovery.statusCode, 400, 'a recovery code never steps up')
  await midStep()
  const withCode = await post(app, '/auth/step-up', { code: codeAt(user.secret, Date.now() + 30_000) }, auth)
  t.equal(withCode.statusCode, 200, 'a TOTP code does')
  const now = await post(app, '/account/mfa/recovery-codes', { currentPassword: user.password, code: codeAt(user.secret, Date.now() - 30_000) }, auth)
  t.equal(json(now).code, 'MFA_CODE_INCORRECT', 'the route then checks its own code: an older step than the step-up\'s is used up')
})

t.test('new recovery codes void the old; turning it off needs the password and a code, and ends it', async (t) => {
  await midStep()
  const user = await enrolledUser()
  const wrongCode = await post(app, '/account/mfa/recovery-codes', { currentPassword: user.password, code: '000000' }, user.auth)
  t.equal(wrongCode.statusCode, 400)
  t.equal(json(wrongCode).code, 'MFA_CODE_INCORRECT')
  const regenerated = await post(app, '/account/mfa/recovery-codes', { currentPassword: user.password, code: codeAt(user.secret, Date.now() + 30_000) }, user.auth)
  t.equal(regenerated.statusCode, 200)
  const fresh: string[] = json(regenerated).data.recoveryCodes
  t.equal(fresh.length, 10)
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), recoveryCode: user.recoveryCodes[0] })).code, 'MFA_CODE_INVALID', 'an old code is void')
  t.equal((await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), recoveryCode: fresh[0] })).statusCode, 200, 'a new one works')
  t.ok(await mailTo(user.email, /^New recovery codes were made/), 'the owner is told')

  const pending = await challenge(app, user)
  await stepsPass(app, user)
  const wrongPassword = await post(app, '/account/mfa/totp', { currentPassword: 'not it at all', code: codeAt(user.secret) }, user.auth, 'DELETE')
  t.equal(json(wrongPassword).code, 'INVALID_CURRENT_PASSWORD')
  const off = await post(app, '/account/mfa/totp', { currentPassword: user.password, code: codeAt(user.secret) }, user.auth, 'DELETE')
  t.equal(off.statusCode, 200)
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: pending, code: codeAt(user.secret) })).code, 'MFA_TOKEN_INVALID', 'sign-ins waiting for a code end with it')
  t.type(json(await login(app, user)).token, 'string', 'sign-in needs the password alone again')
  t.equal(await app.db.selectFrom('recovery_codes').select('user_id').where('user_id', '=', user.id).executeTakeFirst(), undefined, 'recovery codes gone')
  const offAgain = await post(app, '/account/mfa/totp', { currentPassword: user.password, code: codeAt(user.secret) }, user.auth, 'DELETE')
  t.equal(json(offAgain).code, 'MFA_NOT_ENABLED')
  t.ok((await eventsOf(app, user.id)).some((e) => e.type === 'mfa-disabled'))
  t.match((await mailTo(user.email, /^A way to sign in was removed/)).text, /Two-step sign-in/, 'the owner is told it is off')
})

t.test('ten wrong answers in a row, over several sign-ins, pause the checks for 15 minutes and tell the owner', async (t) => {
  await midStep()
  const user = await enrolledUser()
  let mfaToken = ''
  for (let i = 0; i < 10; i++) {
    // Five per mfaToken: the account's count goes on across them.
    if (i % 5 === 0) mfaToken = await challenge(app, user)
    const res = await post(app, '/auth/mfa', i === 7 ? { mfaToken, recoveryCode: 'wrong-guess' } : { mfaToken, code: '000000' })
    t.equal(json(res).code, 'MFA_CODE_INVALID', `wrong answer ${i + 1}`)
  }
  const right = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(right.statusCode, 429, 'suspended: even the right code')
  t.equal(json(right).code, 'RATE_LIMITED')
  const retryAfter = Number(right.headers['retry-after'])
  t.ok(retryAfter > 800 && retryAfter <= 900, `Retry-After ${retryAfter} s`)
  const stepUp = await post(app, '/auth/step-up', { code: codeAt(user.secret, Date.now() + 30_000) }, user.auth)
  t.equal(stepUp.statusCode, 429, 'the step-up\'s code check is suspended too')
  t.ok(await mailTo(user.email, /^Two-step sign-in paused/), 'the owner is mailed')
  const events = await eventsOf(app, user.id)
  t.ok(events.some((e) => e.type === 'mfa-suspended'))
  t.ok(events.some((e) => e.type === 'sign-in-failed' && e.method === 'totp'), 'wrong codes are failed sign-ins')

  await app.db.updateTable('totp_factors').set({ suspended_until: new Date(Date.now() - 1000) }).where('user_id', '=', user.id).execute()
  const after = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(after.statusCode, 200, 'after the pause the right code signs in')
  const factor = await app.db.selectFrom('totp_factors').select('failures').where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(factor.failures, 0, 'and the count starts again')
})

t.test('answers sent at once cannot outrun the suspension: of thirty wrong ones over six sign-ins, ten are checked', async (t) => {
  await midStep()
  const user = await enrolledUser()
  // Someone with the password holds six mfaTokens (thirty tries) and sends every guess at once.
  const tokens = await Promise.all(Array.from({ length: 6 }, () => challenge(app, user)))
  const answers = await Promise.all(tokens.flatMap((mfaToken) => Array.from({ length: 5 }, () => post(app, '/auth/mfa', { mfaToken, code: '000000' }))))
  const outcomes: Record<string, number> = {}
  for (const res of answers) {
    const key = `${res.statusCode} ${json(res).code}`
    outcomes[key] = (outcomes[key] ?? 0) + 1
  }
  t.same(outcomes, { '401 MFA_CODE_INVALID': 10, '429 RATE_LIMITED': 20 }, 'ten checked, as one after another; the rest refused unchecked')
  const right = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(json(right).code, 'RATE_LIMITED', 'and the checks are suspended')
  t.ok(await mailTo(user.email, /^Two-step sign-in paused/), 'the owner is mailed')
  t.equal((await eventsOf(app, user.id)).filter((e) => e.type === 'mfa-suspended').length, 1, 'one suspension')
})

t.test('an answer that is no guess gives its try back, the tenth too: a replayed code never suspends the checks', async (t) => {
  await midStep()
  const user = await enrolledUser()
  // The code that confirmed the enrolment: used already.
  const used = codeAt(user.secret, Date.now())
  let mfaToken = ''
  for (let i = 0; i < 9; i++) {
    if (i % 5 === 0) mfaToken = await challenge(app, user)
    t.equal(json(await post(app, '/auth/mfa', { mfaToken, code: '000000' })).code, 'MFA_CODE_INVALID', `wrong answer ${i + 1}`)
  }
  // The tenth try is the one that would suspend: a replay gives it back, and the suspension with it.
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: used })).code, 'MFA_CODE_INVALID', 'the used code again')
  const factor = await app.db.selectFrom('totp_factors').select(['failures', 'suspended_until']).where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.same(factor, { failures: 9, suspended_until: null }, 'nine wrong answers counted, no suspension')
  const next = await post(app, '/auth/mfa', { mfaToken: await challenge(app, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(next.statusCode, 200, 'the next code signs in')
  t.notOk((await eventsOf(app, user.id)).some((e) => e.type === 'mfa-suspended'))
})

t.test('a right answer and its double at the tenth try: the double, a replay, does not bring back the count the right one cleared', async (t) => {
  await midStep()
  const user = await enrolledUser()
  await app.db.updateTable('totp_factors').set({ failures: 8 }).where('user_id', '=', user.id).execute()
  // One code sent twice (a double click): both take their try before either is checked.
  const first = await takeSecondFactorTry(app.db, user.id, 10, 900)
  const double = await takeSecondFactorTry(app.db, user.id, 10, 900)
  t.same([first?.suspends, double?.suspends], [false, true], 'the double\'s try is the tenth: it suspends')
  await clearSecondFactorFailures(app.db, user.id) // the first is accepted
  await releaseSecondFactorTry(app.db, user.id, true, 10) // the double finds its step used: no guess
  const factor = await app.db.selectFrom('totp_factors').select(['failures', 'suspended_until']).where('user_id', '=', user.id).executeTakeFirstOrThrow()
  t.same(factor, { failures: 0, suspended_until: null }, 'the count the right answer cleared stays cleared')
})

t.test('a password reset never turns the factor off: its answer is the challenge', async (t) => {
  await midStep()
  const user = await enrolledUser()
  t.equal((await post(app, '/auth/password/forgot', { email: user.email })).statusCode, 202)
  const mail = await mailTo(user.email, /^Reset your password/)
  const waiting = await challenge(app, user)
  const reset = await post(app, '/auth/password/reset', { token: mail.token!, password: 'a brand new password' })
  t.equal(reset.statusCode, 200)
  t.equal(json(reset).mfaRequired, true, 'the reset answers the challenge, not a token')
  t.same(await challengesOf(user.id), [hashToken(json(reset).mfaToken)], 'the sign-in waiting before the reset is void; its own challenge is the one left')
  t.equal(json(await post(app, '/auth/mfa', { mfaToken: waiting, code: codeAt(user.secret, Date.now() + 30_000) })).code, 'MFA_TOKEN_INVALID')
  t.notOk('token' in json(reset))
  const done = await post(app, '/auth/mfa', { mfaToken: json(reset).mfaToken, code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(done.statusCode, 200)
  const sessions = json(await app.inject({ method: 'GET', url: '/account/sessions', headers: { authorization: `Bearer ${json(done).token}` } })).data
  const current = sessions.find((s: any) => s.current)
  t.equal(current.method, 'password-reset')
  t.same(current.methods, ['password', 'totp'])
  t.equal(json(await login(app, { ...user, password: 'a brand new password' })).mfaRequired, true, 'later sign-ins still ask')
})

t.test('a stale session cannot enrol, confirm, turn off or renew codes; the refusal names the methods', async (t) => {
  await midStep()
  const user = await enrolledUser()
  await app.db.updateTable('sessions').set({ authenticated_at: new Date(Date.now() - 3600_000), stepped_up_at: null }).where('id', '=', jtiOf(user.token)).execute()
  for (const [method, url, payload] of [
    ['POST', '/account/mfa/totp', { currentPassword: user.password }],
    ['POST', '/account/mfa/totp/confirm', { code: '123456' }],
    ['DELETE', '/account/mfa/totp', { currentPassword: user.password, code: codeAt(user.secret) }],
    ['POST', '/account/mfa/recovery-codes', { currentPassword: user.password, code: codeAt(user.secret) }]
  ] as const) {
    const res = await post(app, url, payload, user.auth, method)
    t.equal(res.statusCode, 403, `${method} ${url}: 403`)
    t.same(json(res).stepUp, { methods: ['password', 'totp'], maxAgeSeconds: 600 }, 'a password or a code steps up')
  }
  t.equal((await app.db.selectFrom('totp_factors').select('user_id').where('user_id', '=', user.id).executeTakeFirst())?.user_id, user.id, 'still on')
})

t.test('twenty concurrent answers with one code on two mfaTokens: exactly one signs in', async (t) => {
  await midStep()
  const user = await enrolledUser()
  const tokens = [await challenge(app, user), await challenge(app, user)]
  const code = codeAt(user.secret, Date.now() + 30_000)
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => post(app, '/auth/mfa', { mfaToken: tokens[i % 2], code })))
  const statuses = answers.map((res) => res.statusCode)
  t.equal(statuses.filter((s) => s === 200).length, 1, 'one 200')
  t.equal(statuses.filter((s) => s === 401).length, 19, 'every other answer 401')
  const sessions = await app.db.selectFrom('sessions').select('methods').where('user_id', '=', user.id).where('methods', 'like', '%totp%').execute()
  t.equal(sessions.length, 1, 'one session')
})

t.test('MFA_ENCRYPTION_KEY: checked at start-up, rotated with _PREVIOUS, required in production once anyone uses it', async (t) => {
  const oldKey = Buffer.alloc(32, 1).toString('base64')
  const newKey = Buffer.alloc(32, 2).toString('hex')
  t.throws(() => loadConfig({ NODE_ENV: 'test', AUTH_JWT_SECRET: 'x'.repeat(32), MFA_ENCRYPTION_KEY: 'too short' }), /MFA_ENCRYPTION_KEY must be 32 random bytes/)
  t.throws(() => loadConfig({ NODE_ENV: 'test', AUTH_JWT_SECRET: 'x'.repeat(32), MFA_ENCRYPTION_KEY_PREVIOUS: oldKey }), /without MFA_ENCRYPTION_KEY/)

  const first = await build(t, { MFA_ENCRYPTION_KEY: oldKey })
  await midStep()
  const user = await enrolledUser(first)
  const sealedBy = async (on: FastifyInstance) => (await on.db.selectFrom('totp_factors').select('secret').where('user_id', '=', user.id).executeTakeFirstOrThrow()).secret.split('.')[1]
  const oldId = await sealedBy(first)
  const dataDir = first.config.db.dataDir
  const url = first.config.db.url
  await first.close()
  const database: Record<string, string> = url === undefined ? { DATA_DIR: dataDir } : { DATABASE_URL: url }

  const rotated = await build(t, { ...database, MFA_ENCRYPTION_KEY: newKey, MFA_ENCRYPTION_KEY_PREVIOUS: oldKey })
  const res = await post(rotated, '/auth/mfa', { mfaToken: await challenge(rotated, user), code: codeAt(user.secret, Date.now() + 30_000) })
  t.equal(res.statusCode, 200, 'a seed sealed under the previous key still opens')
  t.not(await sealedBy(rotated), oldId, 'and is sealed again under the new key once used')
  await rotated.close()

  const newOnly = await build(t, { ...database, MFA_ENCRYPTION_KEY: newKey })
  await stepsPass(newOnly, user)
  const later = await post(newOnly, '/auth/mfa', { mfaToken: await challenge(newOnly, user), code: codeAt(user.secret) })
  t.equal(later.statusCode, 200, 'the previous key can go once the seeds were used')
  await newOnly.close()

  const production = { ...database, NODE_ENV: 'production', BCRYPT_ROUNDS: '12', TRUST_PROXY: 'false', API_URL: 'https://api.example.com', APP_URL: 'https://app.example.com' }
  await t.rejects(build(t, production), /MFA_ENCRYPTION_KEY is required: users have two-step sign-in on/, 'production refuses to start without the key once anyone has it on')
})

t.test('the second factor leaves a user who never turns it on as they were', async (t) => {
  const user = await registerUser(app)
  const res = await login(app, user)
  t.same(Object.keys(json(res)).sort(), ['success', 'token', 'user'], 'login answers as the spec says')
  t.ok(res.cookies.some((c) => c.name === 'auth_token'))
  t.equal((await app.db.selectFrom('mfa_challenges').select('user_id').where('user_id', '=', user.id).executeTakeFirst()), undefined, 'no challenge made')
})
