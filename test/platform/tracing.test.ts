// Traces from the app in process, read from an OTLP receiver: background work stays out of the
// trace of the request that woke it (issue 31: after one registration, every later pass of the
// mail sender landed in that request's trace), statements' spans are named by what they do,
// and their instrumentation scope is the module that makes them. The fleet's traces (caller's
// `traceparent`, balancer, log lines) are test/integration/tracing.test.ts.
import t from 'tap'
import { Outbox } from '../../mail/outbox.js'
import { describeStatement } from '../../db/engine/query-spans.js'
import { build, registerUser, uniqueEmail } from '../support/helper.js'
import { SPAN_KIND, startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const DB_SCOPE = 'task-subscription-backend/db/engine/query-spans'

t.test('background passes stay out of the waking request, and statements are named by their operation', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())
  const app = await build(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    SMTP_URL: sink.url,
    EMAIL_FROM: 'Task App <no-reply@example.com>',
    // No poll while the test runs: every pass is one the test caused, and the registration's
    // wake finds the sender idle.
    EMAIL_POLL_INTERVAL_MS: '3600000'
  })
  const mailTo = (address: string) => sink.waitFor((mail) => mail.envelope.includes(address))

  // Two notices held for later, queued without waking the sender: the pass the registration
  // wakes sees the first due, and the sender's own timer brings a pass for each, after the answer.
  const other = await registerUser(app)
  await app.mail.sender.runOnce()
  const later = [uniqueEmail('later'), uniqueEmail('later')]
  const outbox = new Outbox(app.db, app.mail.context)
  for (const [i, address] of later.entries()) await outbox.emailChanged({ id: other.id }, address, other.email, [], 1_200 * (i + 1))

  const email = uniqueEmail('traced')
  const registered = await app.inject({ method: 'POST', url: '/auth/register', payload: { email, password: 'correct horse battery', name: 'Traced' } })
  t.equal(registered.statusCode, 201)
  const auth = { authorization: `Bearer ${(registered.json() as { token: string }).token}` }
  await mailTo(email)
  for (const address of later) await mailTo(address)

  // The hot statements, prepared: a task created (with the token's check) and a task list.
  t.equal((await app.inject({ method: 'POST', url: '/tasks', headers: auth, payload: { title: 'a traced task' } })).statusCode, 201)
  t.equal((await app.inject({ method: 'GET', url: '/tasks', headers: auth })).statusCode, 200)
  // Sends the spans still batched.
  await app.close()

  const servers = receiver.spans.filter((span) => span.kind === SPAN_KIND.SERVER)
  // The latest of its name (the test's registration is the second).
  const serverOf = (name: string) => servers.filter((span) => span.name === name).sort((a, b) => Number(a.start - b.start)).at(-1)!
  const inTrace = (server: ReceivedSpan) => receiver.spans.filter((span) => span.traceId === server.traceId)
  const describe = (spans: ReceivedSpan[]) => spans.map((span) => `${span.name}: ${String(span.attributes['db.query.text'] ?? '')}`.slice(0, 100))

  const register = serverOf('POST /auth/register')
  t.ok(inTrace(register).some((span) => String(span.attributes['db.query.text']).startsWith('insert into "users"')), 'the registration\'s own statements are in its trace')
  const late = inTrace(register).filter((span) => span.start > register.end)
  t.same(describe(late), [], "nothing in the registration's trace began after its answer")
  const untraced = receiver.spans.filter((span) => !servers.some((server) => server.traceId === span.traceId))
  t.same(describe(untraced), [], "the sender's passes are no trace at all: every span is in a request's trace")

  const statements = receiver.spans.filter((span) => span.attributes['db.system.name'] === 'postgresql')
  t.ok(statements.length > 10, `statements were traced (${statements.length})`)
  const misnamed = statements.filter((span) => {
    const { 'db.operation.name': operation, 'db.collection.name': collection } = span.attributes
    return typeof operation !== 'string' || !/^[A-Z]+$/.test(operation) ||
      span.name !== (collection === undefined ? operation : `${operation} ${String(collection)}`)
  })
  t.same(describe(misnamed), [], 'every statement is named by its operation (and its table, when it names one)')
  t.same([...new Set(statements.map((span) => span.scope))], [DB_SCOPE], 'their scope is the module that makes them')

  const named = (server: ReceivedSpan, statement: string) =>
    inTrace(server).find((span) => String(span.attributes['db.query.text']).startsWith(`/*statement:${statement}*/`))?.name
  const list = serverOf('GET /tasks')
  if (app.dbEngine === 'postgres') {
    // On a PostgreSQL server one statement checks the token and joins the page's JSON
    // (tasks_page_json_for_token).
    t.equal(named(list, 'tasks_page_json_for_token'), 'SELECT tasks', "a page of tasks, with the token's user")
    t.equal(named(list, 'user_for_token'), undefined, 'and no statement of its own for the token')
  } else {
    // Embedded, the POST's statement read the token's holder and the process keeps it
    // (accounts/holder-cache.ts): the page's statement alone (routes/tasks/index.ts).
    t.equal(named(list, 'user_for_token'), undefined, "the token's holder kept: no statement for it")
    t.equal(named(list, 'tasks_page_json_for_token'), undefined, 'nor the page with the check')
    t.equal(named(list, 'tasks_page_json'), 'SELECT tasks', 'a page of tasks')
  }
  t.equal(named(serverOf('POST /tasks'), 'tasks_create_for_token'), 'INSERT tasks', "a task created (with its usage event and the token's check, in one statement)")
  t.ok(inTrace(register).some((span) => span.name === 'INSERT users'), 'the account created: INSERT users')
})

t.test("a statement's operation and table, as the spans name them", async (t) => {
  const cases: Array<[string, string | undefined, string | undefined]> = [
    ['/*statement:user_for_token*/ select "users"."id" from "users" left join "sessions" on true where "users"."id" = $1', 'SELECT', 'users'],
    ['with "task" as (insert into "tasks" ("title") values ($1) returning "id") select "id" from "task"', 'INSERT', 'tasks'],
    ['with "counts" as (select count(*) from "tasks" where "user_id" = $1) select * from "counts"', 'SELECT', 'tasks'],
    // A write after a read names the statement: the token's check, then the task it writes.
    ['with "holder" as (select "id" from "users" where "id" = $1), "task" as (insert into "tasks" ("user_id") select "id" from "holder" returning "id") select * from "holder"', 'INSERT', 'tasks'],
    ['with "old" as (select "id" from "sessions" for update), "gone" as (delete from "public"."sessions" where "id" in (select "id" from "old")) select 1', 'DELETE', 'public.sessions'],
    ['with "x" as (select "id" from "users" for no key update) select * from "x"', 'SELECT', 'users'],
    ['select extract(epoch from min("next_attempt_at") - now()) as "wait" from "email_outbox"', 'SELECT', 'email_outbox'],
    ['select * from (select 1) as "x"', 'SELECT', undefined],
    ['update "email_outbox" set "sent_at" = now() from "users" where "users"."id" = "email_outbox"."user_id"', 'UPDATE', 'email_outbox'],
    ['delete from "public"."sessions" where "ended_at" < $1', 'DELETE', 'public.sessions'],
    ['  -- a comment\n  begin', 'BEGIN', undefined],
    ['select 1', 'SELECT', undefined],
    ['', undefined, undefined],
    ['/* only a comment */', undefined, undefined]
  ]
  for (const [sql, operation, collection] of cases) t.same(describeStatement(sql), { operation, collection }, sql || 'an empty statement')
})
