// accounts/ without Fastify: the limits' protocol on its own, and the service over a real
// database with a stand-in hashing pool and sender, to see what each flow counts, queues and
// wakes. The routes' tests (auth, account, rate-limits, email) remain the contract.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { memoryCounters, signInLimits, deviceKeyFrom } from '../../accounts/limits.js'
import type { Client } from '../../client-address.js'
import { outboxMail } from '../../accounts/mail.js'
import { MailQueue } from '../../mail/queue.js'
import { accountService, type Passwords } from '../../accounts/service.js'
import { sessionService } from '../../accounts/sessions.js'
import { createDatabase } from '../../db/engine/connect.js'
import type { Database } from '../../db/types.js'
import type { Kysely, KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely'
import { migrateToLatest } from '../../db/engine/migrate.js'
import { InvalidCredentialsError } from '../../errors.js'
import { linkKeyFrom } from '../../mail/outbox.js'
import { TEST_SECRET, testDatabaseEnv, uniqueEmail } from '../support/helper.js'

const deviceKey = deviceKeyFrom(TEST_SECRET)
const limitsOf = (max: number, linksPerHour = 0) => signInLimits({ counters: memoryCounters(), max, windowMs: 60_000, linksPerHour, deviceKey })
const client = (deviceCookie?: string): Client => ({ address: `10.0.${Math.floor(Math.random() * 255)}.${Math.floor(Math.random() * 254) + 1}`, deviceCookie })
const status = (promise: Promise<unknown>) => promise.then(() => 'admitted', (err: { statusCode?: number }) => err.statusCode)

t.test('limits: failed checks lock the account; a device that succeeded before passes until it fails as often', async (t) => {
  const limits = limitsOf(2)
  const error = new InvalidCredentialsError()
  for (let i = 0; i < 2; i++) t.equal(await (await limits.admit(client(), 'owner@example.com')).failed(error), error, 'failed() hands back the error to throw')
  t.equal(await status(limits.admit(client(), 'owner@example.com')), 429, 'locked for a new device')
  t.equal(await status(limits.admit(client(), 'other@example.com')), 'admitted', 'another account is not')

  // A device cookie from a success before the lock (another limits instance shares the key, not the counts).
  const laptop = await (await limitsOf(2).admit(client(), 'owner@example.com')).succeeded('owner@example.com')
  t.equal(await status(limits.admit(client(laptop), 'owner@example.com')), 'admitted', 'the owner\'s device passes the lock')
  t.equal(await status(limits.admit(client(laptop), 'other@example.com')), 'admitted')
  const otherAccountsCookie = await (await limitsOf(2).admit(client(), 'other@example.com')).succeeded('other@example.com')
  t.equal(await status(limits.admit(client(otherAccountsCookie), 'owner@example.com')), 429, 'a cookie of another account is no device of this one')
  const renewed = await (await limits.admit(client(laptop), 'owner@example.com')).succeeded('owner@example.com')
  t.equal(renewed, laptop, 'a success renews the cookie the device holds')
  for (let i = 0; i < 2; i++) await (await limits.admit(client(laptop), 'owner@example.com')).failed(error)
  t.equal(await status(limits.admit(client(laptop), 'owner@example.com')), 429, 'past its own failures the device is locked out too')
})

t.test('limits: an attempt counted per client fails against no account; attempts per client come first', async (t) => {
  const limits = limitsOf(2)
  const address = client()
  await (await limits.admit(address)).failed(new Error('a bad link'))
  await (await limits.admit(address)).failed(new Error('a bad link'))
  t.equal(await status(limits.admit(address)), 429, 'the third attempt from one client')
  t.equal(await status(limits.admit(client(), 'anyone@example.com')), 'admitted', 'and no account counted a failure')
  const off = limitsOf(0)
  for (let i = 0; i < 5; i++) await (await off.admit(address, 'anyone@example.com')).failed(new Error('wrong'))
  t.equal(await status(off.admit(address, 'anyone@example.com')), 'admitted', 'AUTH_RATE_LIMIT_MAX=0 counts nothing')
})

t.test('limits: link requests are counted apart from sign-ins, and an inbox gets its links an hour', async (t) => {
  const limits = limitsOf(2, 3)
  const address = client()
  t.same([await limits.admitLinkRequest(address, 'a@example.com'), await limits.admitLinkRequest(address, 'a@example.com')], [true, true])
  t.equal(await status(limits.admitLinkRequest(address, 'a@example.com')), 429, 'the third request from one client')
  t.equal(await status(limits.admit(address)), 'admitted', 'its sign-in attempts are untouched')
  t.same([await limits.admitLinkRequest(client(), 'a@example.com'), await limits.admitLinkRequest(client(), 'a@example.com')], [true, false], 'the inbox had its three links')
  const perInboxOnly = limitsOf(0, 1)
  t.same([await perInboxOnly.admitLinkRequest(address, 'b@example.com'), await perInboxOnly.admitLinkRequest(address, 'b@example.com')], [true, false],
    'AUTH_RATE_LIMIT_MAX=0 leaves the inbox\'s cap')
})

// The service over a real database: hashing is a stand-in (the pool is plugins/app/passwords.ts's concern).
const env = await testDatabaseEnv(t)
const handle = createDatabase<Database>({ url: env.DATABASE_URL, dataDir: env.DATA_DIR ?? '' })
t.teardown(() => handle.close())
await migrateToLatest(handle.db)
const { db } = handle

const passwords: Passwords = { admit () {}, hash: async (password) => `plain:${password}`, verify: async (password, hash) => hash === `plain:${password}` }

function serviceWith (limits = limitsOf(3), database: Kysely<Database> = db) {
  const sent = { wakes: 0, background: [] as Array<Promise<unknown>> }
  const context = { appUrl: 'http://app.test', product: 'Task App', linkKey: linkKeyFrom(TEST_SECRET) }
  const sender = {
    wake: () => { sent.wakes++ },
    // As mail/sender.ts does: the work begins on a later turn of the event loop, after the answer.
    inBackground: (_what: string, work: () => Promise<unknown>) => { sent.background.push(new Promise((resolve) => setImmediate(resolve)).then(work)) }
  }
  const sessions = sessionService({ db: database, warn: (err) => { throw err } })
  return { accounts: accountService({ db: database, passwords, limits, mail: outboxMail(new MailQueue(database, context, sender), limits.admitInbox), sessions }), sent }
}

const outboxOf = async (userId: string) =>
  (await db.selectFrom('email_outbox').select(['kind', 'recipient']).where('user_id', '=', userId).execute()).map((row) => `${row.kind} ${row.recipient}`).sort()

t.test('register queues a welcome and wakes once; its device cookie signs in while the account is locked', async (t) => {
  const { accounts, sent } = serviceWith()
  const email = uniqueEmail('Ada').toUpperCase()
  const home = client()
  const { user, deviceCookie } = await accounts.register(home, { email, password: 'correct horse', name: '  ' })
  t.equal(user.email, email.toLowerCase())
  t.equal(user.name, null, 'a blank name is none')
  t.same(await outboxOf(user.id), [`welcome ${user.email}`])
  t.equal(sent.wakes, 1)
  t.equal(await status(accounts.register(client(), { email, password: 'another one' })), 409)
  t.equal(sent.wakes, 1, 'a refused sign-up wakes nothing')

  for (let i = 0; i < 3; i++) t.equal(await status(accounts.logIn(client(), { email, password: `guess ${i}` })), 401)
  t.equal(await status(accounts.logIn(client(), { email, password: 'correct horse' })), 429, 'locked')
  const signedIn = await accounts.logIn({ ...client(), deviceCookie }, { email, password: 'correct horse' })
  t.equal(signedIn.user.id, user.id, 'the device that signed up passes')
})

t.test('changeProfile: a new email and password queue their three emails in one transaction and void older reset links', async (t) => {
  const { accounts, sent } = serviceWith()
  const { user } = await accounts.register(client(), { email: uniqueEmail('change'), password: 'old password' })
  await accounts.requestPasswordReset(client(), user.email)
  await Promise.all(sent.background)
  const wakes = sent.wakes
  const newEmail = uniqueEmail('moved')
  const changed = await accounts.changeProfile(client(), user, { email: newEmail, currentPassword: 'old password', newPassword: 'new password' })
  t.equal(changed.passwordChanged, true)
  t.equal(changed.user.email, user.email, 'the address stays until the new one confirms it')
  t.equal(changed.pendingEmail, newEmail)
  t.equal(sent.wakes, wakes + 1, 'one wake, after the commit')
  t.same(await outboxOf(user.id), [
    `email_change_requested ${user.email}`, `email_verification ${newEmail}`, `password_changed ${user.email}`, `password_reset ${user.email}`, `welcome ${user.email}`
  ].sort())
  const liveResetLinks = await db.selectFrom('email_tokens').select('token_hash').where('user_id', '=', user.id).where('purpose', '=', 'password_reset').where('used_at', 'is', null).execute()
  t.same(liveResetLinks, [], 'the reset link sent before the change is void')
  // The device cookie is bound to the address that signs in: it passes that account's lock.
  const strict = limitsOf(1)
  await (await strict.admit(client(), user.email)).failed(new Error('guess'))
  t.equal(await status(strict.admit(client(changed.deviceCookie), user.email)), 'admitted')

  const nameOnly = await accounts.changeProfile(client(), changed.user, { name: ' Ada ' })
  t.same([nameOnly.user.name, nameOnly.passwordChanged, nameOnly.deviceCookie], ['Ada', false, undefined], 'no password checked, no device cookie')
  t.equal(sent.wakes, wakes + 1, 'a change without mail wakes nothing')
})

t.test('changeProfile: the change that lost a password race queues nothing and counts no failure', async (t) => {
  const { accounts, sent } = serviceWith(limitsOf(3))
  const { user: stale } = await accounts.register(client(), { email: uniqueEmail('raced'), password: 'old password' })
  await accounts.changeProfile(client(), stale, { currentPassword: 'old password', newPassword: 'winner password' })
  const before = { outbox: await outboxOf(stale.id), wakes: sent.wakes }
  // The loser checked the password of the row it read before the winner committed.
  const lost = await accounts.changeProfile(client(), stale, { currentPassword: 'old password', newPassword: 'loser password' }).catch((err: { code?: string }) => err.code)
  t.equal(lost, 'PASSWORD_CHANGE_CONFLICT')
  t.same({ outbox: await outboxOf(stale.id), wakes: sent.wakes }, before)
  // Two failures of the three that lock it: a third, counted for the loser, would have locked it.
  for (let i = 0; i < 2; i++) t.equal(await status(accounts.logIn(client(), { email: stale.email, password: `guess ${i}` })), 401)
  t.equal(await status(accounts.logIn(client(), { email: stale.email, password: 'winner password' })), 'admitted', 'the account is not locked: the check had succeeded')
})

t.test('requestPasswordReset queues the same work for an unknown address, up to the inbox\'s mails', async (t) => {
  // Two mails an hour: the welcome, and one reset link.
  const { accounts, sent } = serviceWith(limitsOf(5, 2))
  const { user } = await accounts.register(client(), { email: uniqueEmail('forgot'), password: 'old password' })
  const unknown = `nobody-${randomUUID()}@example.com`
  await accounts.requestPasswordReset(client(), unknown)
  await accounts.requestPasswordReset(client(), user.email)
  t.equal(sent.background.length, 2, 'queued in the background either way')
  await Promise.all(sent.background)
  await accounts.requestPasswordReset(client(), user.email)
  t.equal(sent.background.length, 2, 'past the inbox\'s links: nothing more')
  t.same(await db.selectFrom('email_outbox').select('id').where('recipient', '=', unknown).execute(), [])
  t.same(await outboxOf(user.id), [`password_reset ${user.email}`, `welcome ${user.email}`])
})

/** Records the kind of every statement (SELECT, INSERT, …) sent through the Kysely it is added to. */
class StatementLog implements KyselyPlugin {
  readonly statements: string[] = []
  transformQuery (args: PluginTransformQueryArgs): RootOperationNode {
    this.statements.push(args.node.kind)
    return args.node
  }

  async transformResult (args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result
  }
}

// Whether an address has an account must not show in the work "forgot" costs (its times are the
// benchmark's: `npm run bench -- --only=timing`): counted here, not timed.
t.test('requestPasswordReset: nothing before the answer, and the same statement after it, whether or not the address has an account', async (t) => {
  const log = new StatementLog()
  const { accounts, sent } = serviceWith(limitsOf(100, 100), db.withPlugin(log))
  const { user } = await accounts.register(client(), { email: uniqueEmail('forgetful'), password: 'a password' })
  await Promise.all(sent.background.splice(0))
  const work = async (email: string) => {
    log.statements.length = 0
    await accounts.requestPasswordReset(client(), email)
    const beforeAnswer = [...log.statements]
    await Promise.all(sent.background.splice(0))
    return { beforeAnswer, after: log.statements.slice(beforeAnswer.length) }
  }
  const unknown = await work(`nobody-${randomUUID()}@example.com`)
  const known = await work(user.email)
  t.same(unknown.beforeAnswer, [], 'no statement before the answer (unknown address)')
  t.same(known.beforeAnswer, [], 'nor for a known one')
  t.same(known.after, unknown.after, 'after it, the same statements either way')
  t.equal(known.after.length, 1, 'one statement: the token and the message only when the address has an account')
  t.same(await outboxOf(user.id), [`password_reset ${user.email}`, `welcome ${user.email}`], 'and it queued the reset for the account')
})
