// GET /metrics: off unless METRICS_PORT or METRICS_TOKEN is set; behind the token on the main
// port, open on its own port; never in the API document, never rate-limited; and the numbers
// an operator watches move when requests, sign-ins and webhook events happen.
import type { FastifyInstance } from 'fastify'
import type { AddressInfo } from 'node:net'
import { sql } from 'kysely'
import t from 'tap'
import { build, json, registerUser } from '../support/helper.js'
import { makeEvent, signedDelivery } from '../support/stripe-events.js'

const TOKEN = 'metrics-token-0123456789abcdef'
const WEBHOOK_SECRET = 'whsec_test_metrics_0123456789'
const bearer = { authorization: `Bearer ${TOKEN}` }

/** Every sample of a scrape, keyed `name{labels}` as Prometheus prints them. */
function samples (text: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    out.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return out
}

async function scrape (app: FastifyInstance): Promise<Map<string, number>> {
  const res = await app.inject({ method: 'GET', url: '/metrics', headers: bearer })
  if (res.statusCode !== 200) throw new Error(`scrape failed: ${res.statusCode} ${res.body}`)
  return samples(res.body)
}

t.test('off by default: no /metrics at all', async (t) => {
  const app = await build(t)
  const res = await app.inject({ method: 'GET', url: '/metrics', headers: bearer })
  t.equal(res.statusCode, 404)
  t.equal(app.metrics.server, null)
})

t.test('behind METRICS_TOKEN on the main port', async (t) => {
  const app = await build(t, {
    METRICS_TOKEN: TOKEN,
    // A client limit of 2 per window: scrapes must not count against it.
    RATE_LIMIT_MAX: '2',
    PAYMENT_SECRET_KEY: 'sk_test_metrics',
    PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET
  })

  t.test('401 in the envelope without the token or with another one', async (t) => {
    for (const headers of [{}, { authorization: 'Bearer wrong-token-0123456789abcdef' }, { authorization: TOKEN }, { authorization: `Basic ${TOKEN}` }]) {
      const res = await app.inject({ method: 'GET', url: '/metrics', headers })
      t.equal(res.statusCode, 401, JSON.stringify(headers))
      t.match(json(res), { success: false, code: 'UNAUTHORIZED' })
      t.notMatch(res.body, /http_requests_total/)
    }
  })

  t.test('Prometheus text, never rate-limited', async (t) => {
    for (let i = 0; i < 5; i++) {
      const res = await app.inject({ method: 'GET', url: '/metrics', headers: bearer, remoteAddress: '10.9.9.9' })
      t.equal(res.statusCode, 200)
      t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/)
      t.equal(res.headers['x-ratelimit-limit'], undefined)
    }
  })

  t.test('not in the API document', async (t) => {
    const document = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
    t.notOk(Object.keys(document.paths).some((path) => path.startsWith('/metrics')))
  })

  t.test('the numbers move', async (t) => {
    const before = await scrape(app)
    for (const name of ['process_resident_memory_bytes', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_p99_seconds',
      'db_pool_connections_in_use', 'db_pool_connections_max', 'password_hashing_queue_depth', 'password_hashing_in_pool']) {
      t.ok(before.has(name), `${name} is exported`)
    }
    // PGlite cannot tell how many queries wait for its connection: no series rather than a false 0.
    t.equal(before.has('db_pool_requests_waiting'), process.env.DATABASE_URL !== undefined, 'pool waiting: PostgreSQL only')

    const user = await registerUser(app) // one hash in the pool
    for (let i = 0; i < 3; i++) {
      t.equal((await app.inject({ method: 'GET', url: '/tasks', headers: user.auth, remoteAddress: `10.8.0.${i}` })).statusCode, 200)
    }
    t.equal((await app.inject({ method: 'GET', url: '/tasks/987654321', headers: user.auth, remoteAddress: '10.8.1.1' })).statusCode, 404)
    const delivery = signedDelivery(makeEvent('customer.created', { id: 'cus_metrics', object: 'customer' }), WEBHOOK_SECRET)
    t.equal((await app.inject({ method: 'POST', url: '/webhooks/payment', headers: delivery.headers, payload: delivery.body, remoteAddress: '10.8.2.2' })).statusCode, 200)

    const after = await scrape(app)
    const moved = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0)
    const list = 'method="GET",route="/tasks",status_code="200"'
    t.equal(moved(`http_requests_total{${list}}`), 3, 'GET /tasks 200 counted')
    t.equal(moved(`http_request_duration_seconds_count{${list}}`), 3, 'and timed')
    t.ok(moved(`http_request_duration_seconds_sum{${list}}`) > 0)
    t.equal(moved(`http_request_duration_seconds_bucket{le="+Inf",${list}}`), 3)
    t.equal(moved('http_requests_total{method="GET",route="/tasks/:id",status_code="404"}'), 1, 'by route pattern and status')
    t.equal(moved('http_requests_total{method="POST",route="/auth/register",status_code="201"}'), 1)
    t.notOk([...after.keys()].some((key) => key.includes('987654321')), 'never the raw URL')
    t.equal(moved('webhook_events_total{type="customer.created",outcome="ignored"}'), 1, 'webhook event by type and outcome')
    t.equal(after.get('password_hashing_in_pool'), 0, 'no hash left in the pool')
  })

  t.test('the outbox depth counts the emails waiting to be sent', async (t) => {
    const waiting = async () => (await scrape(app)).get('email_outbox_depth') ?? NaN
    const before = await waiting()
    const rows = ['a', 'b', 'c'].map((label) => ({ kind: 'test', recipient: `${label}@example.com`, subject: 'x', text_body: 'x', next_attempt_at: sql<string>`now() + interval '1 hour'` }))
    const ids = (await app.db.insertInto('email_outbox').values(rows).returning('id').execute()).map((row) => row.id)
    t.equal(await waiting(), before + 3, 'three queued for later')
    await app.db.updateTable('email_outbox').set({ sent_at: sql<string>`now()` }).where('id', '=', ids[0]!).execute()
    await app.db.updateTable('email_outbox').set({ failed_at: sql<string>`now()` }).where('id', '=', ids[1]!).execute()
    t.equal(await waiting(), before + 1, 'one sent and one given up no longer wait')
    await app.db.deleteFrom('email_outbox').where('id', 'in', ids).execute()
  })
})

t.test('a full hashing queue is counted as sheds', async (t) => {
  const app = await build(t, { METRICS_TOKEN: TOKEN, BCRYPT_WORKERS: '1', BCRYPT_QUEUE_MAX: '0', BCRYPT_ROUNDS: '8' })
  const before = await scrape(app)
  t.equal(before.get('password_hashing_capacity'), 1)
  const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => app.inject({
    method: 'POST', url: '/auth/register', remoteAddress: `10.7.0.${i}`, payload: { email: `shed-${i}-${Date.now()}@example.com`, password: 'correct horse battery', name: 'Shed' }
  })))
  const shed = answers.filter((res) => res.statusCode === 503).length
  t.ok(shed > 0, `${shed} of 12 sign-ups shed`)
  const after = await scrape(app)
  t.equal((after.get('password_hashing_shed_total') ?? 0) - (before.get('password_hashing_shed_total') ?? 0), shed)
  t.equal(after.get('http_requests_total{method="POST",route="/auth/register",status_code="503"}'), shed)
})

t.test('on METRICS_PORT: a server of its own, without the token, closed with the app', async (t) => {
  const app = await build(t, { METRICS_PORT: '0', HOST: '0.0.0.0' })
  const server = app.metrics.server
  t.ok(server?.listening, 'listening once the app is ready')
  t.equal((server!.address() as AddressInfo).address, '127.0.0.1', 'on loopback, whatever HOST the service listens on: it has no token')
  const base = `http://127.0.0.1:${(server!.address() as AddressInfo).port}`
  const res = await fetch(`${base}/metrics`)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
  t.match(await res.text(), /\nprocess_resident_memory_bytes \d+/)
  t.equal((await fetch(`${base}/other`)).status, 404)
  t.equal((await fetch(`${base}/metrics`, { method: 'POST' })).status, 404)
  t.equal((await app.inject({ method: 'GET', url: '/metrics' })).statusCode, 404, 'nothing on the main port without METRICS_TOKEN')
  await app.close()
  t.notOk(server!.listening, 'closed with the app')
})

t.test('METRICS_HOST opens the METRICS_PORT server to other hosts, on purpose', async (t) => {
  const app = await build(t, { METRICS_PORT: '0', METRICS_HOST: '0.0.0.0' })
  t.equal((app.metrics.server!.address() as AddressInfo).address, '0.0.0.0')
})
