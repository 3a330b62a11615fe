// Traces across the fleet: instances started from server.ts behind HAProxy (deploy/haproxy.cfg),
// sending their spans over OTLP/HTTP to a receiver this test runs. A request that crossed the
// balancer with a caller's `traceparent` is one server span, the caller's child, named by its
// route pattern and status, with the database statements and the provider calls it made as
// its children, and its log lines carry the trace id. Nothing secret is in any span. Without
// an endpoint, nothing of the SDK is loaded at all. On the embedded database one instance
// stands behind the balancer's three slots (it cannot share its database); with DATABASE_URL two.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { TEST_SECRET, testDatabaseEnv, uniqueEmail, until } from '../support/helper.js'
import { SPAN_KIND, startOtlpReceiver } from '../support/otlp-receiver.js'
import { startHaproxy } from '../fleet/haproxy.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'
import { freePort, startServer, waitUntilUp, type Running } from './process.js'

const { SERVER, CLIENT } = SPAN_KIND

const hex = (bytes: number) => randomBytes(bytes).toString('hex')
/** A caller's span: its W3C `traceparent`, sampled. */
const callerSpan = () => {
  const traceId = hex(16)
  const spanId = hex(8)
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

/** The JSON lines an instance printed. */
const logLines = (server: Running): Array<Record<string, unknown>> =>
  server.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>)

async function stop (server: Running): Promise<string> {
  if (server.child.exitCode === null) server.child.kill('SIGTERM')
  await server.exited
  return server.output()
}

const loadedPackages = (output: string): string[] => {
  const match = /tracing packages loaded: (\[.*\])/.exec(output)
  if (match === null) throw new Error(`no report of loaded packages in: ${output.slice(-2000)}`)
  return JSON.parse(match[1]!) as string[]
}

const PRELOAD = ['./test/integration/loaded-modules.mjs']
const PASSWORD = 'correct horse battery staple'
const PAYMENT_SECRET_KEY = `sk_test_${hex(12)}`

t.test('a request across the balancer is one server span, child of the caller, with its statements and provider calls', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const stripe = await startStripeStandIn()
  t.teardown(() => stripe.close())
  const database = await testDatabaseEnv(t)
  const shared = {
    ...database,
    AUTH_JWT_SECRET: TEST_SECRET,
    // One address for the fleet: a token's audience, valid on every instance.
    API_URL: 'http://api.fleet.test',
    BCRYPT_ROUNDS: '4',
    RATE_LIMIT_MAX: '0',
    AUTH_RATE_LIMIT_MAX: '0',
    SHUTDOWN_DRAIN_MS: '0',
    TRUST_PROXY: '1',
    PAYMENT_SECRET_KEY,
    PAYMENT_PRICE_IDS: 'price_pro_monthly',
    PAYMENT_API_URL: stripe.url,
    PAYMENT_MAX_RETRIES: '0',
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_SERVICE_NAME: 'tasks-under-test'
  }
  const count = database.DATABASE_URL === undefined ? 1 : 2
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()))
  const instances = ports.map((port) => startServer({ ...shared, PORT: String(port) }, PRELOAD))
  t.teardown(() => { for (const instance of instances) instance.child.kill('SIGKILL') })
  await Promise.all(instances.map(waitUntilUp))
  const haproxy = await startHaproxy(t, [ports[0]!, ports[1 % count]!, ports[0]!], 'deploy')
  for (const name of ['api-1', 'api-2', 'api-3']) await haproxy.waitFor(name, 'UP')
  const base = `http://127.0.0.1:${haproxy.port}`

  const email = uniqueEmail('traced')
  const registered = await fetch(`${base}/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD, name: 'Traced' }) })
  t.equal(registered.status, 201)
  const { token } = await registered.json() as { token: string }
  const auth = { authorization: `Bearer ${token}` }

  const caller = callerSpan()
  const checkout = await fetch(`${base}/checkout`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json', traceparent: caller.traceparent },
    body: JSON.stringify({ priceId: 'price_pro_monthly' })
  })
  t.equal(checkout.status, 200, 'the checkout went through the balancer')
  const requestId = checkout.headers.get('x-request-id')

  const created = await fetch(`${base}/tasks`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'a traced task' }) })
  t.equal(created.status, 201)
  const taskId = (await created.json() as { data: { id: string } }).data.id
  // Refused (no query parameters here): its status is on the span, its query string is not.
  const reader = callerSpan()
  const queryToken = hex(16)
  const read = await fetch(`${base}/tasks/${taskId}?token=${queryToken}`, { headers: { ...auth, traceparent: reader.traceparent } })
  t.equal(read.status, 400)

  const serverSpan = (traceId: string) => receiver.spans.find((span) => span.traceId === traceId && span.kind === SERVER)
  // Batched: sent within 5 s of ending.
  await until(() => serverSpan(caller.traceId) !== undefined && serverSpan(reader.traceId) !== undefined, 'the server spans to arrive', 30_000)

  const trace = receiver.spans.filter((span) => span.traceId === caller.traceId)
  const servers = trace.filter((span) => span.kind === SERVER)
  t.equal(servers.length, 1, 'one server span for the request')
  const request = servers[0]!
  t.equal(request.name, 'POST /checkout', 'named by method and route pattern')
  t.equal(request.parentSpanId, caller.spanId, "the caller's span is its parent")
  t.match(request.attributes, { 'http.route': '/checkout', 'http.request.method': 'POST', 'http.response.status_code': 200, 'url.path': '/checkout' })
  t.equal(request.resource['service.name'], 'tasks-under-test', 'OTEL_SERVICE_NAME names the service')
  t.type(request.resource['service.instance.id'], 'string', 'and each instance has an id')

  const children = trace.filter((span) => span.parentSpanId === request.spanId)
  const statements = children.filter((span) => span.attributes['db.system.name'] === 'postgresql')
  t.ok(statements.length >= 2, `the database statements are its children (${statements.map((span) => span.name).join(', ')})`)
  for (const statement of statements) {
    t.equal(statement.kind, CLIENT)
    const { 'db.operation.name': operation, 'db.collection.name': collection } = statement.attributes
    t.equal(statement.name, collection === undefined ? operation : `${String(operation)} ${String(collection)}`, 'named by its operation and table')
    t.equal(statement.scope, 'task-subscription-backend/db/engine/query-spans')
    t.type(statement.attributes['db.query.text'], 'string')
  }
  t.ok(statements.some((span) => /\$1/.test(String(span.attributes['db.query.text']))), 'statements as compiled, their values as placeholders')
  const calls = children.filter((span) => span.attributes['payment.provider'] === 'stripe')
  t.same(calls.map((span) => span.name).sort(), ['stripe checkout.sessions.create', 'stripe customers.create'], 'a span per provider call')
  for (const call of calls) {
    t.equal(call.kind, CLIENT)
    t.match(call.attributes, { 'server.address': '127.0.0.1', 'server.port': Number(new URL(stripe.url).port) })
  }
  t.equal(trace.length, 1 + children.length, 'nothing else in the trace')

  const get = serverSpan(reader.traceId)!
  t.equal(get.name, 'GET /tasks/:id', 'a route with a parameter: its pattern, not the path')
  t.match(get.attributes, { 'http.route': '/tasks/:id', 'http.response.status_code': 400, 'url.path': `/tasks/${taskId}` })
  t.equal(get.parentSpanId, reader.spanId)

  const untraced = receiver.spans.filter((span) => span.kind === SERVER && ![caller.traceId, reader.traceId].includes(span.traceId))
  t.same(untraced.map((span) => span.name).sort(), ['POST /auth/register', 'POST /tasks'], 'requests without a traceparent start traces of their own')
  t.notOk(receiver.spans.some((span) => span.attributes['http.route'] === '/ready'), "the balancer's health checks are not traced")
  if (count === 2) {
    const instancesSeen = new Set(receiver.spans.filter((span) => span.kind === SERVER).map((span) => span.resource['service.instance.id']))
    t.equal(instancesSeen.size, 2, 'the requests were spread over both instances, each sending its own spans')
  }

  const everything = receiver.bodies.join('\n')
  for (const secret of [PASSWORD, token, TEST_SECRET, PAYMENT_SECRET_KEY, email, 'a traced task', queryToken]) {
    t.notOk(everything.includes(secret), `no span holds ${secret === token ? 'the token' : JSON.stringify(secret)}`)
  }

  const outputs = await Promise.all(instances.map(stop))
  const lines = instances.flatMap(logLines).filter((line) => line.reqId === requestId)
  t.ok(lines.length >= 1, 'the checkout wrote log lines')
  for (const line of lines) t.match(line, { trace_id: caller.traceId, span_id: request.spanId }, `"${String(line.msg)}" carries the trace and span ids`)
  for (const output of outputs) t.ok(loadedPackages(output).includes('@opentelemetry/sdk-trace'), 'the SDK was loaded')
})

t.test('without an endpoint nothing of the SDK is loaded and nothing is sent', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const port = await freePort()
  const server = startServer({ ...await testDatabaseEnv(t), PORT: String(port), AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', SHUTDOWN_DRAIN_MS: '0' }, PRELOAD)
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const caller = callerSpan()
  const registered = await fetch(`${server.base}/auth/register`, {
    method: 'POST', headers: { 'content-type': 'application/json', traceparent: caller.traceparent }, body: JSON.stringify({ email: uniqueEmail('untraced'), password: PASSWORD })
  })
  t.equal(registered.status, 201)
  const requestId = registered.headers.get('x-request-id')
  const output = await stop(server)
  const lines = logLines(server).filter((line) => line.reqId === requestId)
  t.ok(lines.length >= 1)
  for (const line of lines) t.notOk('trace_id' in line || 'span_id' in line, 'no trace ids in the log')
  // The API packages (no-op tracing calls, attribute names) may be there: the database and
  // payment code import them. The SDK, the exporter and the instrumentation may not.
  t.same(loadedPackages(output).filter((name) => name !== '@opentelemetry/api' && name !== '@opentelemetry/semantic-conventions'), [], 'no SDK package, no instrumentation loaded')
  t.equal(receiver.bodies.length, 0, 'nothing sent')
})
