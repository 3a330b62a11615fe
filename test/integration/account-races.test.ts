// Account changes racing on PostgreSQL, where transactions run side by side (the embedded
// database runs one at a time). Each race is made to happen, not hoped for: a transaction of
// the test's own holds the user's row, the requests queue behind it in the order the race
// needs, and it lets go.
import pg from 'pg'
import t from 'tap'
import { build, json, serverDatabase, uniqueEmail, until, verifiedUser } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { codeAt, midStep } from '../support/totp.js'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const { url, name, admin } = await serverDatabase(t, 'account_races')
const app = await build(t, { DATABASE_URL: url.toString(), DATABASE_POOL_MAX: '10', SMTP_URL: sink.url })

/** Until `n` of this database's connections wait for a lock. */
const waitingForLocks = (n: number) => until(async () => {
  const { rows } = await admin.query<{ n: string }>("select count(*) as n from pg_stat_activity where datname = $1 and wait_event_type = 'Lock'", [name])
  return Number(rows[0]!.n) >= n
}, `${n} waiting for a lock`)

/** A transaction of the test's own holding the user's row until `release`. */
async function holdUser (userId: string): Promise<{ release: () => Promise<void> }> {
  const client = new pg.Client({ connectionString: url.toString() })
  await client.connect()
  await client.query('begin')
  await client.query('select id from users where id = $1 for update', [userId])
  return { release: async () => { await client.query('commit'); await client.end() } }
}

t.test('a link to a new address confirms that address only, though another change commits while it is checked', async (t) => {
  const user = await verifiedUser(app)
  const change = (email: string) => app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { email, currentPassword: user.password } })
  const own = uniqueEmail('own-new')
  t.equal((await change(own)).statusCode, 200)
  const link = (await sink.waitFor((m) => m.to === own && /^Verify your email/.test(m.subject) && m.token !== undefined)).token!

  // The account's holder asks to move to someone else's address while its link for `own` is
  // being followed: the link is checked against the row waiting for `own`, and then the row
  // waits for the victim's.
  const victim = uniqueEmail('victim')
  const held = await holdUser(user.id)
  const moving = change(victim)
  await waitingForLocks(1)
  const confirming = app.inject({ method: 'POST', url: '/auth/email/verify', payload: { token: link } })
  await waitingForLocks(2)
  await held.release()
  t.equal((await moving).statusCode, 200, 'the change to the victim\'s address waits for its own link')
  const confirmed = await confirming
  t.equal(confirmed.statusCode, 400, 'the link for another address applies nothing')
  t.equal(json(confirmed).code, 'VERIFICATION_TOKEN_INVALID')
  const row = await app.db.selectFrom('users').select(['email', 'email_verified']).where('id', '=', user.id).executeTakeFirstOrThrow()
  t.equal(row.email, user.email, 'the account keeps its address: the victim\'s inbox confirmed nothing')
})

t.test('a second-factor sign-in and a password change at once: both answered, and the change ends the new session', async (t) => {
  const user = await verifiedUser(app)
  const post = (url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) => app.inject({ method: 'POST', url, headers, payload })
  const { secret } = json(await post('/account/mfa/totp', { currentPassword: user.password }, user.auth)).data
  await midStep(5_000)
  t.equal((await post('/account/mfa/totp/confirm', { code: codeAt(secret) }, user.auth)).statusCode, 200)
  const { mfaToken } = json(await post('/auth/login', { email: user.email, password: user.password }))

  // The change takes the user's row first; the answer, having used its challenge, then needs
  // the row too, while the change waits to void that challenge.
  const held = await holdUser(user.id)
  const changing = app.inject({ method: 'PATCH', url: '/account/profile', headers: user.auth, payload: { currentPassword: user.password, newPassword: 'a new password here' } })
  await waitingForLocks(1)
  const answering = post('/auth/mfa', { mfaToken, code: codeAt(secret, Date.now() + 30_000) })
  await waitingForLocks(2)
  await held.release()
  const [changed, answered] = await Promise.all([changing, answering])
  t.equal(changed.statusCode, 200, `the change is answered (${changed.body.slice(0, 80)})`)
  t.equal(answered.statusCode, 200, `the sign-in is answered (${answered.body.slice(0, 80)})`)
  const me = await app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${json(answered).token}` } })
  t.equal(me.statusCode, 401, 'and its session is one the change ended')
})
