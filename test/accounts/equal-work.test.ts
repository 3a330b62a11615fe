// Whether an account exists must not show: not in the answer, and not in the work the answer
// costs. Shown here as equal work, counted, not timed (a timed ratio flakes on a busy machine;
// the times themselves are the benchmark's: `npm run bench -- --only=timing`, bench/timing.ts):
// - sign-in: an unknown email and a wrong password get the same bytes after the same bcrypt
//   work, one comparison each (an unknown email compares against a dummy hash), as the hashing
//   pool's own counter at GET /metrics shows;
// - "forgot password": the same bytes, no statement before the answer, and the same statement
//   after it whether or not the address has an account (accounts/service.ts, mail/outbox.ts):
//   the statements the service sends are recorded by a Kysely plugin on the real database.
import { randomUUID } from 'node:crypto'
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely'
import t from 'tap'
import { memoryCounters, signInLimits, deviceKeyFrom } from '../../accounts/limits.js'
import { outboxMail } from '../../accounts/mail.js'
import { accountService, type Passwords } from '../../accounts/service.js'
import { sessionService } from '../../accounts/sessions.js'
import { createDatabase } from '../../db/engine/connect.js'
import { migrateToLatest } from '../../db/engine/migrate.js'
import type { Database } from '../../db/types.js'
import { linkKeyFrom } from '../../mail/outbox.js'
import { MailQueue } from '../../mail/queue.js'
import { build, registerUser, TEST_SECRET, testDatabaseEnv, uniqueEmail } from '../support/helper.js'

const METRICS_TOKEN = 'a-metrics-token-for-the-test'

t.test('sign-in: an unknown email and a wrong password, the same answer after the same bcrypt work', async (t) => {
  // A cost other than 12, so the dummy hash is made by the first sign-in that needs it (below).
  const app = await build(t, { BCRYPT_ROUNDS: '5', METRICS_TOKEN })
  const user = await registerUser(app)
  const comparisons = async () => {
    const res = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    return Number(/^password_hashing_runs_total\{op="compare"\} (\d+)$/m.exec(res.body)?.[1] ?? 0)
  }
  const login = (email: string) => app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'wrong password' } })
  // The dummy hash at this cost is made once, by the first unknown email: not part of what is compared.
  await login(uniqueEmail('first'))
  const answers = new Set<string>()
  for (let i = 0; i < 5; i++) {
    for (const [kind, email] of [['unknown email', uniqueEmail('nobody')], ['wrong password', user.email]] as const) {
      const before = await comparisons()
      const res = await login(email)
      answers.add(`${res.statusCode} ${res.body}`)
      t.equal(await comparisons() - before, 1, `${kind}: one bcrypt comparison`)
    }
  }
  t.same(answers, new Set(['401 {"success":false,"error":"Invalid email or password","code":"INVALID_CREDENTIALS"}']), 'one answer, byte for byte')
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

t.test('forgot: nothing before the answer, and the same statement after it, whether or not the address has an account', async (t) => {
  const env = await testDatabaseEnv(t)
  const handle = createDatabase<Database>({ url: env.DATABASE_URL, dataDir: env.DATA_DIR ?? '' })
  t.teardown(() => handle.close())
  await migrateToLatest(handle.db)
  const log = new StatementLog()
  const db = handle.db.withPlugin(log)
  const background: Array<Promise<unknown>> = []
  // As mail/sender.ts does: the work begins on a later turn of the event loop, after the answer.
  const sender = { wake: () => {}, inBackground: (_what: string, work: () => Promise<unknown>) => { background.push(new Promise((resolve) => setImmediate(resolve)).then(work)) } }
  const limits = signInLimits({ counters: memoryCounters(), max: 100, windowMs: 60_000, linksPerHour: 100, deviceKey: deviceKeyFrom(TEST_SECRET) })
  const passwords: Passwords = { admit () {}, hash: async (password) => `plain:${password}`, verify: async (password, hash) => hash === `plain:${password}` }
  const mail = outboxMail(new MailQueue(db, { appUrl: 'http://app.test', product: 'Task App', linkKey: linkKeyFrom(TEST_SECRET) }, sender), limits.admitInbox)
  const accounts = accountService({ db, passwords, limits, mail, sessions: sessionService({ db, warn: (err) => { throw err } }) })
  const { user } = await accounts.register({ address: '10.0.0.1', deviceCookie: undefined }, { email: uniqueEmail('forgetful'), password: 'a password' })

  const work = async (email: string) => {
    log.statements.length = 0
    await accounts.requestPasswordReset({ address: '10.0.0.2', deviceCookie: undefined }, email)
    const beforeAnswer = [...log.statements]
    await Promise.all(background.splice(0))
    return { beforeAnswer, after: log.statements.slice(beforeAnswer.length) }
  }
  const unknown = await work(`nobody-${randomUUID()}@example.com`)
  const known = await work(user.email)
  t.same(unknown.beforeAnswer, [], 'no statement before the answer (unknown address)')
  t.same(known.beforeAnswer, [], 'nor for a known one')
  t.same(known.after, unknown.after, 'after it, the same statements either way')
  t.equal(known.after.length, 1, 'one statement: the token and the message only when the address has an account')
  const queued = await handle.db.selectFrom('email_outbox').select('kind').where('user_id', '=', user.id).where('kind', '=', 'password_reset').execute()
  t.equal(queued.length, 1, 'and it queued the reset for the account')
})
