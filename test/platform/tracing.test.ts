// Traces from the app in process, read from an OTLP receiver: background work stays out of the
// trace of the request that woke it (issue 31: after one registration, every later pass of the
// mail sender landed in that request's trace). The fleet's traces (caller's `traceparent`,
// balancer, log lines) are test/integration/tracing.test.ts.
import t from 'tap'
import { Outbox } from '../../mail/outbox.js'
import { build, registerUser, uniqueEmail } from '../support/helper.js'
import { SPAN_KIND, startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js'
import { startSmtpSink } from '../support/smtp-sink.js'

t.test('background passes stay out of the trace of the request that woke them', async (t) => {
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
  await mailTo(email)
  for (const address of later) await mailTo(address)

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
})
