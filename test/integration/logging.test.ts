// What an operator reads: the production server's JSON log lines (one per request, with
// the route pattern, not the raw URL) and the copy shipped to Axiom (a local stand-in of
// its ingest endpoint). No secret ever reaches either.
import { once } from 'node:events'
import { createServer, type IncomingMessage } from 'node:http'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import { testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { freePort, startServer, waitUntilUp } from './process.js'
import { signedDelivery, makeEvent } from '../support/stripe-events.js'

// The Axiom stand-in: records every ingest request.
const ingested: Array<{ url: string, authorization?: string, events: Array<Record<string, unknown>> }> = []
const axiom = createServer((req: IncomingMessage, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    let raw = Buffer.concat(chunks)
    if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw)
    const text = raw.toString('utf8')
    const events = text.trim().startsWith('[') ? JSON.parse(text) : text.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))
    ingested.push({ url: req.url ?? '', authorization: req.headers.authorization, events })
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ingested":1,"failed":0,"failures":[],"processedBytes":1,"blocksCreated":0,"walLength":0}')
  })
}).listen(0, '127.0.0.1')
await once(axiom, 'listening')
t.teardown(() => { axiom.close() })

const SECRETS = {
  password: 'hunter2-correct-horse',
  newPassword: 'even-better-horse-42',
  webhookSecret: 'whsec_logging_secret_value',
  paymentKey: 'sk_test_logging_secret_key',
  logToken: 'xaat-logging-token-value'
}

t.test('production logs: one JSON line per request, route patterns, no secrets; shipped to Axiom', async (t) => {
  const port = await freePort()
  const server = startServer({
    PORT: String(port),
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    AUTH_JWT_SECRET: TEST_SECRET,
    PAYMENT_SECRET_KEY: SECRETS.paymentKey,
    PAYMENT_WEBHOOK_SECRET: SECRETS.webhookSecret,
    LOG_TOKEN: SECRETS.logToken,
    LOG_DATASET: 'service-logs',
    LOG_URL: `http://127.0.0.1:${(axiom.address() as { port: number }).port}`,
    ...await testDatabaseEnv(t)
  })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const call = (path: string, init: RequestInit = {}) => fetch(`${server.base}${path}`, init)
  const jsonBody = (body: unknown, headers: Record<string, string> = {}) =>
    ({ method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

  const email = uniqueEmail('logs')
  const registered = await call('/auth/register', jsonBody({ email, password: SECRETS.password }))
  const { token, user } = await registered.json() as { token: string, user: { id: string } }
  const cookie = (registered.headers.get('set-cookie') ?? '').split(';')[0]!
  await call('/auth/login', jsonBody({ email, password: SECRETS.password }))
  await call('/auth/login', jsonBody({ email, password: 'wrong-password-here' }))
  const created = await call('/tasks', jsonBody({ title: 'secret plans' }, { authorization: `Bearer ${token}` }))
  const taskId = ((await created.json()) as { data: { id: number } }).data.id
  await call(`/tasks/${taskId}`, { headers: { cookie } })
  await call('/account/profile', { method: 'PATCH', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify({ currentPassword: SECRETS.password, newPassword: SECRETS.newPassword }) })
  const { body, headers } = signedDelivery(makeEvent('customer.created', { id: 'cus_x', object: 'customer' }), SECRETS.webhookSecret)
  await call('/webhooks/payment', { method: 'POST', headers, body })
  await call('/webhooks/payment', { method: 'POST', headers: { ...headers, 'stripe-signature': 't=1,v1=forged' }, body })
  await call('/health')

  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0)
  const lines = server.output().trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>)
  const requests = lines.filter((l) => l.msg === 'request')

  t.same(requests.map((l) => `${l.method} ${l.route} ${l.status}`), [
    'POST /auth/register 201',
    'POST /auth/login 200',
    'POST /auth/login 401',
    'POST /tasks 201',
    'GET /tasks/:id 200',
    'PATCH /account/profile 200',
    'POST /webhooks/payment 200',
    'POST /webhooks/payment 400'
  ], 'one line per request, by route pattern; /health is not logged')
  for (const line of requests) {
    t.match(line, { level: 30, reqId: /^[0-9a-f-]{36}$/, durationMs: Number }, `${line.method} ${line.route} fields`)
  }
  t.equal(requests.find((l) => l.route === '/tasks/:id')!.userId, user.id, 'the user id when known')

  const everything = server.output() + JSON.stringify(ingested.map((batch) => batch.events))
  for (const [name, value] of Object.entries({ ...SECRETS, token, cookie: cookie.split('=')[1]!, signature: headers['stripe-signature']! })) {
    t.notOk(everything.includes(value), `${name} never reaches a log line`)
  }

  const shipped = ingested.flatMap((batch) => batch.events)
  t.ok(ingested.every((batch) => batch.url.includes('service-logs') && batch.authorization === `Bearer ${SECRETS.logToken}`), 'sent to the dataset with the token')
  t.same(shipped.filter((e) => e.msg === 'request').map((e) => `${e.method} ${e.route} ${e.status}`), requests.map((l) => `${l.method} ${l.route} ${l.status}`), 'the same lines reach Axiom')
})
