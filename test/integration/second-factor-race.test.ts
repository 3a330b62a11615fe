// Two-step sign-in across a fleet (docs/second-factor.md): two instances of the app on one
// PostgreSQL database. A code works once however many requests race with it, on whichever
// instances; the account's run of wrong answers is counted by all of them together.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, json, randomAddress, serverDatabase, verifiedUser } from '../support/helper.js'
import { codeAt, midStep } from '../support/totp.js'

const { url } = await serverDatabase(t, 'mfa_race')
const env = { DATABASE_URL: url.toString(), DATABASE_POOL_MAX: '10' }
const [a, b] = await Promise.all([build(t, env), build(t, env)]) as [FastifyInstance, FastifyInstance]

const post = (on: FastifyInstance, url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  on.inject({ method: 'POST', url, remoteAddress: randomAddress(), headers, payload })

/** A user with TOTP on (enrolled through `a`), and its seed. */
async function enrolled () {
  // Not within the last 3 s of a step: the codes computed here are judged in the step they were made for.
  await midStep()
  const user = await verifiedUser(a)
  const secret = json(await post(a, '/account/mfa/totp', { currentPassword: user.password }, user.auth)).data.secret as string
  const confirmed = await post(a, '/account/mfa/totp/confirm', { code: codeAt(secret, Date.now()) }, user.auth)
  if (confirmed.statusCode !== 200) throw new Error(`confirm: ${confirmed.body}`)
  return { user, secret }
}
const challenge = async (on: FastifyInstance, user: { email: string, password: string }) =>
  json(await post(on, '/auth/login', { email: user.email, password: user.password })).mfaToken as string

t.test('twenty concurrent answers with one code, on two instances with two mfaTokens: exactly one 200', async (t) => {
  for (let round = 0; round < 3; round++) {
    const { user, secret } = await enrolled()
    const tokens = [await challenge(a, user), await challenge(b, user)]
    const code = codeAt(secret, Date.now() + 30_000)
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => post(i % 2 === 0 ? a : b, '/auth/mfa', { mfaToken: tokens[Math.floor(i / 2) % 2]!, code })))
    const statuses = answers.map((res) => res.statusCode)
    t.equal(statuses.filter((s) => s === 200).length, 1, `round ${round + 1}: one 200`)
    t.same([...new Set(statuses.filter((s) => s !== 200))], [401], 'every other answer 401')
    const sessions = await a.db.selectFrom('sessions').select('id').where('user_id', '=', user.id).where('methods', '=', 'password totp').execute()
    t.equal(sessions.length, 1, 'one session started')
  }
})

t.test('ten wrong answers over both instances and several mfaTokens suspend the checks on both', async (t) => {
  const { user, secret } = await enrolled()
  const tokens = [await challenge(a, user), await challenge(b, user)]
  const wrong = await Promise.all(Array.from({ length: 10 }, (_, i) => post(i % 2 === 0 ? a : b, '/auth/mfa', { mfaToken: tokens[i % 2]!, code: '000000' })))
  t.same([...new Set(wrong.map((res) => json(res).code))], ['MFA_CODE_INVALID'], 'ten wrong answers at once, each refused')
  for (const on of [a, b]) {
    const res = await post(on, '/auth/mfa', { mfaToken: await challenge(on, user), code: codeAt(secret, Date.now() + 30_000) })
    t.equal(res.statusCode, 429, 'then even the right code waits, on either instance')
    t.ok(Number(res.headers['retry-after']) > 800)
  }
  const events = await a.db.selectFrom('security_events').select('type').where('user_id', '=', user.id).where('type', '=', 'mfa-suspended').execute()
  t.equal(events.length, 1, 'suspended once')
})
