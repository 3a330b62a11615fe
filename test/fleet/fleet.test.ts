// npm run test:fleet: the service as production runs it, with real parts started here.
// PostgreSQL (the machine's: a fresh database) behind PgBouncer in transaction mode, Redis (the
// machine's), three instances of the built service (node dist/server.js with the flags of npm
// start), HAProxy running deploy/haproxy.cfg in front, an SMTP sink and the Stripe stand-in.
// Steady reads and writes from many users on many client addresses go through the balancer
// while instances are restarted one by one and killed; every request's outcome is counted and
// every write matched with what was stored. Figures are printed (and written to
// .tap/fleet-figures.json) for docs/operations.md.
//
// Settings: FLEET_RATE (requests per second, default 300: the machine is shared, so the
// assertions are about counts, never latency), FLEET_DRAIN_MS (the instances'
// SHUTDOWN_DRAIN_MS; unset: the service's default; 0 shows what an instance that closes at once
// does to a rolling restart), FLEET_STALL_MS (how long an instance stops answering before it is
// killed, default 500: a hung instance killed by its supervisor, so requests are in flight on
// it when it dies; 0: a plain kill -9).
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t, { type Test } from 'tap'
import { createDatabase } from '../../db/engine/connect.js'
import type { Database } from '../../db/types.js'
import { queueEmail } from '../../db/email-outbox.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { checkoutSessionCompleted, signedDelivery } from '../support/stripe-events.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'
import { freePort } from '../integration/process.js'
import { Client, clientAddresses } from './client.js'
import { startHaproxy, type Haproxy, type RetryPolicy } from './haproxy.js'
import { startInstance, waitUntilReady, type Instance } from './instance.js'
import { failed, Load, summarize, type LoadUser, type RequestRecord } from './load.js'
import { startPgBouncer } from './pgbouncer.js'

const RATE = Number(process.env.FLEET_RATE ?? 300)
const DRAIN_MS = process.env.FLEET_DRAIN_MS
const STALL_MS = Number(process.env.FLEET_STALL_MS ?? 500)
// Each client address stays well under the global limit (RATE_LIMIT_MAX, 600 a minute) even if
// a minute of load falls into one of its windows: 3 requests a second is 180.
const LOAD_CLIENTS = Math.max(50, Math.ceil(RATE / 3))
const USERS = 24
const STATEMENT_TIMEOUT_MS = 15_000
const WEBHOOK_SECRET = 'whsec_fleet'

const root = t
const figures: Record<string, unknown> = { rate: RATE, stallMs: STALL_MS }
const report = (t: Test, name: string, value: Record<string, unknown>) => {
  figures[name] = value
  t.comment(`${name}: ${JSON.stringify(value)}`)
}

// --- The parts ---------------------------------------------------------------------------
const serverUrl = new URL(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres')
const databaseName = `fleet_${randomUUID().replaceAll('-', '')}`
const admin = new pg.Client({ connectionString: serverUrl.toString() })
await admin.connect()
await admin.query(`create database ${databaseName}`)
// Behind a pooler in transaction mode the statement timeout is the database's own (docs/operations.md).
await admin.query(`alter database ${databaseName} set statement_timeout = ${STATEMENT_TIMEOUT_MS}`)
const directUrl = new URL(serverUrl)
directUrl.pathname = `/${databaseName}`
// The test's own reads, straight to PostgreSQL.
const direct = new pg.Pool({ connectionString: directUrl.toString(), max: 4 })
direct.on('error', () => {})
t.teardown(async () => {
  await direct.end()
  await admin.query(`drop database if exists ${databaseName} with (force)`)
  await admin.end()
})

const bouncer = await startPgBouncer(t, { poolSize: 20, maxClientConnections: 400 })
const sink = await startSmtpSink()
t.teardown(() => sink.close())
const stripe = await startStripeStandIn()
t.teardown(() => stripe.close())

const ports = [await freePort(), await freePort(), await freePort()]
const env: Record<string, string> = {
  NODE_ENV: 'production',
  HOST: '127.0.0.1',
  LOG_LEVEL: 'info',
  AUTH_JWT_SECRET: randomBytes(32).toString('base64url'),
  // The tokens' audience: one public URL for the whole fleet (the default follows each PORT,
  // and an instance would refuse every token another one issued).
  API_URL: 'http://api.fleet.test',
  DATABASE_URL: bouncer.url(databaseName),
  DATABASE_POOLER: 'transaction',
  DATABASE_PREPARED_STATEMENTS: 'false',
  DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
  REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  TRUST_PROXY: '1',
  SMTP_URL: sink.url,
  EMAIL_POLL_INTERVAL_MS: '1000',
  PAYMENT_SECRET_KEY: 'sk_test_fleet',
  PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  PAYMENT_PRICE_IDS: 'price_pro_monthly',
  PAYMENT_API_URL: stripe.url,
  PAYMENT_MAX_RETRIES: '0',
  // The machine running this is shared and slow at times: no load shedding, so what fails is
  // what deploys and crashes make fail.
  MAX_EVENT_LOOP_DELAY_MS: '0',
  ...(DRAIN_MS !== undefined && { SHUTDOWN_DRAIN_MS: DRAIN_MS })
}
const instances: Instance[] = []
// Every process started, replaced ones included: what they logged is checked at the end.
const everStarted: Instance[] = []
const start = (i: number): Instance => {
  const instance = startInstance(`api-${i + 1}`, ports[i]!, env)
  instances[i] = instance
  everStarted.push(instance)
  return instance
}
/** The instances' error lines so far, by message, for a failure's diagnosis. */
const loggedErrors = () => {
  const counts: Record<string, number> = {}
  for (const instance of everStarted) {
    for (const line of instance.errors()) {
      let key = line.slice(0, 120)
      try {
        const entry = JSON.parse(line) as { msg?: string, err?: { message?: string } }
        key = `${instance.name}: ${entry.msg}${entry.err?.message ? `: ${entry.err.message.slice(0, 100)}` : ''}`
      } catch {}
      counts[key] = (counts[key] ?? 0) + 1
    }
  }
  return counts
}
t.teardown(() => { for (const instance of instances) instance.child.kill('SIGKILL') })

const addresses = clientAddresses(LOAD_CLIENTS + 20)
const clients = addresses.slice(0, LOAD_CLIENTS).map((address) => new Client(address))
const spare = addresses.slice(LOAD_CLIENTS).map((address) => new Client(address))
const local = new Client('127.0.0.1')
t.teardown(() => { for (const client of [...clients, ...spare, local]) client.close() })
const users: LoadUser[] = []

const uniqueEmail = (label: string) => `${label}-${randomUUID().slice(0, 8)}@example.com`
const body = (text: string) => JSON.parse(text) as Record<string, any>

async function balancer (t: Test, policy: RetryPolicy): Promise<Haproxy> {
  const haproxy = await startHaproxy(t, ports, policy)
  t.teardown(() => haproxy.stop())
  for (let i = 0; i < 3; i++) await haproxy.waitFor(`api-${i + 1}`, 'UP')
  return haproxy
}

async function register (client: Client, port: number): Promise<LoadUser> {
  const answer = await client.send(port, '/auth/register', { method: 'POST', json: { email: uniqueEmail('fleet'), password: 'correct horse battery', name: 'Fleet User' } })
  if (answer.status !== 201) throw new Error(`register: ${answer.status} ${answer.body}`)
  const { user, token } = body(answer.body)
  return { id: user.id, token }
}

interface Writes {
  acknowledged: number
  stored: number
  /** Titles stored more than once. */
  doubled: number
  /** Answered 201 but not stored. */
  lost: number
  /** Stored, though the client was told the write failed (or got no answer). */
  storedWithoutAnswer: number
  /** Tasks stored without their task_created event (both are one statement's). */
  halfDone: number
}

/** Every write of a load, matched with what the database holds. */
async function reconcile (records: RequestRecord[], tag: string): Promise<Writes> {
  const { rows } = await direct.query<{ title: string, n: number }>('select title, count(*)::int as n from tasks where title like $1 group by title', [`${tag}-%`])
  const stored = new Map(rows.map((row) => [row.title, row.n]))
  const writes = records.filter((r) => r.kind === 'create')
  // `not in` over a hashed set: a correlated `not exists` on the jsonb key was planned as a
  // nested loop (row estimates of tables just filled), 10 s for 12,000 tasks, over the
  // database's statement timeout (CI run of stop 26).
  const { rows: [half] } = await direct.query<{ n: number }>(`
    select count(*)::int as n from tasks t where t.title like $1 and t.id::text not in (
      select properties->>'taskId' from usage_events where name = 'task_created' and properties ? 'taskId')`, [`${tag}-%`])
  return {
    acknowledged: writes.filter((r) => r.status === 201).length,
    stored: [...stored.values()].reduce((a, b) => a + b, 0),
    doubled: rows.filter((row) => row.n > 1).length,
    lost: writes.filter((r) => r.status === 201 && !stored.has(r.title!)).length,
    storedWithoutAnswer: writes.filter((r) => r.status !== 201 && stored.has(r.title!)).length,
    halfDone: half!.n
  }
}

// --- The tests ---------------------------------------------------------------------------
let haproxy: Haproxy
// Without a fleet there is nothing to measure: later tests fail at once instead of each
// waiting out its own timeouts.
let broken: string | undefined
function phase (name: string, fn: (t: Test) => Promise<void>, { essential = false } = {}) {
  t.test(name, async (t) => {
    if (broken !== undefined) {
      t.fail(`not run: ${broken}`)
      return
    }
    try {
      await fn(t)
    } finally {
      if (essential && !t.passing()) broken = `"${name}" failed`
    }
  })
}

phase('cold start: three instances started at once on an empty database migrate it once, and all are ready', async (t) => {
  const startedAt = Date.now()
  for (let i = 0; i < 3; i++) start(i)
  await Promise.all(instances.map((instance) => waitUntilReady(instance)))
  const readyAfterMs = Date.now() - startedAt

  const migrations = readdirSync(join(PROJECT_ROOT, 'dist/db/migrations')).filter((file) => file.endsWith('.js')).map((file) => file.slice(0, -3)).sort()
  const { rows } = await direct.query<{ name: string }>('select name from kysely_migration order by name')
  t.same(rows.map((row) => row.name), migrations, 'every migration recorded once')
  const applied = instances.map((instance) => instance.messages().filter((m) => m.startsWith('migration applied: ')).map((m) => m.slice('migration applied: '.length)))
  t.same(applied.flat().sort(), migrations, 'each migration applied by exactly one instance (the others waited on the migration lock, then found nothing to do)')
  const { rows: [lock] } = await direct.query<{ is_locked: number }>('select is_locked from kysely_migration_lock')
  t.equal(lock?.is_locked, 0, 'the migration lock is free')
  report(t, 'coldStart', { migrations: migrations.length, appliedPerInstance: applied.map((list) => list.length), readyAfterMs })
}, { essential: true })

phase('the balancer: deploy/haproxy.cfg sees all three instances ready', async (t) => {
  haproxy = await startHaproxy(root, ports, 'deploy')
  for (let i = 0; i < 3; i++) t.ok(await haproxy.waitFor(`api-${i + 1}`, 'UP'), `api-${i + 1} UP`)
  // The load's users, each registered from a client address of its own (the sign-up limit counts per address).
  for (let i = 0; i < USERS; i += 6) {
    users.push(...await Promise.all(clients.slice(i, Math.min(i + 6, USERS)).map((client) => register(client, haproxy.port))))
  }
  t.equal(users.length, USERS)
}, { essential: true })

phase('shared state through the balancer', async (t) => {
  const port = haproxy.port
  const [x, y, z, w, a, b] = spare as [Client, Client, Client, Client, Client, Client]

  t.test('the sign-in limit holds per client address, across instances', async (t) => {
    const before = await haproxy.servers()
    const login = (client: Client, headers: Record<string, string> = {}) =>
      client.send(port, '/auth/login', { method: 'POST', headers, json: { email: uniqueEmail('nobody'), password: 'not the password' } })
    const statuses = (await Promise.all(Array.from({ length: 12 }, () => login(x)))).map((answer) => answer.status)
    t.same(statuses.filter((s) => s === 401).length, 10, 'AUTH_RATE_LIMIT_MAX (10) failed sign-ins from one address')
    t.same(statuses.filter((s) => s === 429).length, 2, 'then 429, whichever instance answers')
    t.equal((await login(x, { 'x-forwarded-for': '203.0.113.7' })).status, 429, 'an X-Forwarded-For the client wrote itself changes nothing')
    t.equal((await login(y)).status, 401, 'another client address is not limited: clients are told apart, not all counted as the balancer')
    const after = await haproxy.servers()
    t.ok(after.every((server, i) => server.total > before[i]!.total), 'the attempts went to all three instances')
  })

  t.test('the global limit holds per client address, across instances', async (t) => {
    const limit = 600
    const answers = []
    for (let i = 0; i < limit + 5; i += 50) {
      answers.push(...await Promise.all(Array.from({ length: Math.min(50, limit + 5 - i) }, () => z.send(port, '/auth/me'))))
    }
    t.equal(answers.filter((answer) => answer.status === 401).length, limit, 'RATE_LIMIT_MAX requests answered (401: no token)')
    t.equal(answers.filter((answer) => answer.status === 429).length, 5, 'the rest refused')
    t.equal((await w.send(port, '/auth/me')).status, 401, 'another client address is not limited')
  })

  t.test('a token revoked on one instance is refused by the others at once', async (t) => {
    const user = await register(a, port)
    const auth = { authorization: `Bearer ${user.token}` }
    for (const p of ports) t.equal((await local.send(p, '/auth/me', { headers: auth })).status, 200)
    t.equal((await local.send(ports[0]!, '/auth/logout', { method: 'POST', headers: auth })).status, 200, 'signed out on api-1')
    t.equal((await local.send(ports[1]!, '/auth/me', { headers: auth })).status, 401, 'refused by api-2')
    t.equal((await local.send(ports[2]!, '/auth/me', { headers: auth })).status, 401, 'refused by api-3')
    for (let i = 0; i < 3; i++) t.equal((await a.send(port, '/auth/me', { headers: auth })).status, 401, 'and through the balancer')
  })

  t.test('200 queued emails are delivered exactly once by the three instances\' senders', async (t) => {
    const handle = createDatabase<Database>({ url: directUrl.toString(), dataDir: '' })
    t.teardown(() => handle.close())
    const tag = randomUUID().slice(0, 8)
    const recipients = Array.from({ length: 200 }, (_, i) => `outbox-${tag}-${i}@example.com`)
    await handle.db.transaction().execute(async (tx) => {
      for (const recipient of recipients) {
        await queueEmail(tx, { userId: null, kind: 'fleet', recipient, subject: `Fleet ${tag}`, text: 'one of 200', html: '<p>one of 200</p>', linkNonce: null })
      }
    })
    const deadline = Date.now() + 90_000
    for (;;) {
      const { rows: [row] } = await direct.query<{ n: number }>('select count(*)::int as n from email_outbox where recipient like $1 and sent_at is null', [`outbox-${tag}-%`])
      if (row!.n === 0) break
      if (Date.now() > deadline) throw new Error(`${row!.n} emails still unsent`)
      await sleep(200)
    }
    const received = new Map<string, number>()
    for (const mail of sink.received.filter((m) => m.to.startsWith(`outbox-${tag}-`))) received.set(mail.to, (received.get(mail.to) ?? 0) + 1)
    t.equal(received.size, 200, 'every one arrived')
    t.same([...received.values()].filter((n) => n !== 1), [], 'none twice')
    const { rows: [attempts] } = await direct.query<{ max: number }>('select max(attempts)::int as max from email_outbox where recipient like $1', [`outbox-${tag}-%`])
    t.equal(attempts?.max, 1, 'each claimed by one sender once')
  })

  t.test('one webhook event delivered to every instance at once is applied once', async (t) => {
    const user = await register(b, port)
    const auth = { authorization: `Bearer ${user.token}` }
    const checkout = await b.send(port, '/checkout', { method: 'POST', headers: auth, json: { priceId: 'price_pro_monthly' } })
    t.equal(checkout.status, 200)
    const { session } = stripe.completeCheckout([...stripe.checkoutSessions.keys()].at(-1)!)
    const event = checkoutSessionCompleted(session)
    const deliveries = [...ports, ...ports].map((p) => {
      const { body, headers } = signedDelivery(event, WEBHOOK_SECRET)
      return local.send(p, '/webhooks/payment', { method: 'POST', headers, body })
    })
    t.same((await Promise.all(deliveries)).map((answer) => answer.status), [200, 200, 200, 200, 200, 200])
    const { rows } = await direct.query('select id from usage_events where user_id = $1 and name = $2', [user.id, 'subscription_upgraded'])
    t.equal(rows.length, 1, 'applied exactly once')
    const subscription = await b.send(port, '/subscription', { headers: auth })
    t.equal(body(subscription.body).data.plan, 'pro')
  })
})

phase('rolling restart under load, with the balancer retrying nothing: no request fails, every write stored once', async (t) => {
  await haproxy.stop()
  const balancerNone = await balancer(t, 'none')
  const tag = `rolling-${randomUUID().slice(0, 8)}`
  const load = new Load({ port: balancerNone.port, rate: RATE, clients, users, tag })
  load.start()
  await sleep(2000)
  const restarts = []
  for (let i = 0; i < 3; i++) {
    const name = `api-${i + 1}`
    const old = instances[i]!
    const before = (await balancerNone.servers())[i]!.total
    const signalledAt = Date.now()
    old.child.kill('SIGTERM')
    const [down, exit] = await Promise.all([balancerNone.waitFor(name, 'DOWN'), old.exited])
    const servedWhileDraining = (await balancerNone.servers())[i]!.total - before
    t.equal(exit.code, 0, `${name} exits cleanly`, { output: old.tail() })
    t.ok(down <= exit.at, `${name}: the balancer took it out before it closed its port`)
    start(i)
    const up = await balancerNone.waitFor(name, 'UP')
    restarts.push({ name, outOfRotationAfterMs: down - signalledAt, exitedAfterMs: exit.at - signalledAt, requestsSentToItAfterSigterm: servedWhileDraining, backInRotationAfterMs: up - signalledAt })
  }
  await sleep(2000)
  await load.stop()
  const summary = summarize(load.records)
  const writes = await reconcile(load.records, tag)
  report(t, 'rollingRestart', { ...summary, ...writes, restarts, balancer: balancerNone.troubleCounts() })
  t.equal(summary.failed, 0, 'no request failed', { failures: summary.failures, balancer: balancerNone.troubles().slice(0, 20), errors: loggedErrors(), pgbouncer: bouncer.output().slice(-3000) })
  t.equal(writes.lost, 0, 'every 201 is stored')
  t.equal(writes.doubled, 0, 'none twice')
  t.equal(writes.storedWithoutAnswer, 0, 'nothing stored without its 201')
  t.equal(writes.stored, writes.acknowledged)
  await balancerNone.stop()
})

/**
 * Load through a balancer with `policy` while instances crash in turn: each stops answering
 * for STALL_MS (queries it had sent still commit meanwhile, their answers never leave), is
 * killed (SIGKILL), and is started again once the balancer has taken it out.
 */
async function crash (t: Test, policy: RetryPolicy, { idempotencyKeys = false, kills = 1 } = {}) {
  const lb = await balancer(t, policy)
  const tag = `crash-${policy}${idempotencyKeys ? '-keys' : ''}-${randomUUID().slice(0, 8)}`
  const load = new Load({ port: lb.port, rate: RATE, clients, users, tag, idempotencyKeys })
  load.start()
  await sleep(3000)
  const crashes: Array<{ killedAt: number, down: number }> = []
  for (const i of [1, 2, 0].slice(0, kills)) {
    const victim = instances[i]!
    if (STALL_MS > 0) {
      victim.child.kill('SIGSTOP')
      await sleep(STALL_MS)
    }
    const killedAt = Date.now()
    victim.child.kill('SIGKILL')
    const down = await lb.waitFor(victim.name, 'DOWN')
    crashes.push({ killedAt, down })
    await sleep(1000)
    start(i)
    await lb.waitFor(victim.name, 'UP')
    await sleep(1000)
  }
  await load.stop()
  const summary = summarize(load.records)
  const writes = await reconcile(load.records, tag)
  const failures = load.records.filter(failed)
  // Each failure against the crash before it: in flight when the instance was killed (it was
  // sent before), between the kill and the balancer taking the instance out, or after that.
  const crashBefore = (r: RequestRecord) => crashes.findLast((c) => c.killedAt - STALL_MS - 1000 <= r.startedAt)
  const counts = {
    kills,
    failedInFlightAtTheKill: failures.filter((r) => { const c = crashBefore(r); return c !== undefined && r.startedAt <= c.killedAt }).length,
    failedBetweenKillAndOutOfRotation: failures.filter((r) => { const c = crashBefore(r); return c !== undefined && r.startedAt > c.killedAt && r.startedAt <= c.down }).length,
    failedAfterOutOfRotation: failures.filter((r) => { const c = crashBefore(r); return c === undefined || r.startedAt > c.down }).length,
    writesFailed: failures.filter((r) => r.kind === 'create').length,
    outOfRotationAfterMs: crashes.map((c) => c.down - c.killedAt),
    balancer: lb.troubleCounts()
  }
  t.equal(counts.failedAfterOutOfRotation, 0, 'nothing sent after the balancer took the instance out failed (nor before a crash)', { failures: summary.failures, balancer: lb.troubles().slice(0, 30), errors: loggedErrors(), pgbouncer: bouncer.output().slice(-3000) })
  t.equal(writes.halfDone, 0, 'no write half-done (every task has its usage event)')
  t.equal(writes.lost, 0, 'every 201 is stored')
  await lb.stop()
  return { summary, writes, counts }
}

phase('crash under load (an instance hangs, then kill -9), the balancer as deployed: only requests in flight on it fail; no write stored twice', async (t) => {
  const { summary, writes, counts } = await crash(t, 'deploy')
  report(t, 'crash', { ...summary, ...writes, ...counts })
  t.equal(writes.doubled, 0, 'plain POSTs are never replayed: none stored twice')
})

phase('crash under load, the balancer also retrying plain POSTs (the setting deploy/haproxy.cfg avoids): writes stored twice are counted', async (t) => {
  const { summary, writes, counts } = await crash(t, 'post', { kills: 3 })
  report(t, 'crashPostRetried', { ...summary, ...writes, ...counts })
  t.pass(`${writes.doubled} writes stored twice, ${writes.storedWithoutAnswer} stored though their client saw a failure`)
})

// Idempotency-Key on POST /tasks is issue 23 §3, merged separately: this runs once the API
// document says POST /tasks takes the header.
const openapi = JSON.parse(readFileSync(join(PROJECT_ROOT, 'openapi.json'), 'utf8')) as { paths: Record<string, Record<string, { parameters?: Array<{ name: string, in: string }> }>> }
const takesIdempotencyKey = (openapi.paths['/tasks']?.post?.parameters ?? []).some((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key')

phase('crash under load, writes carrying an Idempotency-Key that the balancer may retry: none stored twice', async (t) => {
  if (!takesIdempotencyKey) {
    t.comment('NOT RUN: openapi.json does not list an Idempotency-Key header on POST /tasks (issue 23 §3 not merged into this build)')
    figures.crashIdempotencyKeys = 'not run: POST /tasks takes no Idempotency-Key in this build'
    t.pass('waiting for issue 23 §3')
    return
  }
  const { summary, writes, counts } = await crash(t, 'deploy', { idempotencyKeys: true, kills: 3 })
  report(t, 'crashIdempotencyKeys', { ...summary, ...writes, ...counts })
  t.equal(writes.doubled, 0, 'none stored twice')
})

phase('the instances logged no error (those replaced and killed included)', async (t) => {
  t.same(loggedErrors(), {})
})

t.teardown(() => {
  const file = join(PROJECT_ROOT, '.tap', 'fleet-figures.json')
  mkdirSync(join(PROJECT_ROOT, '.tap'), { recursive: true })
  writeFileSync(file, JSON.stringify(figures, null, 2) + '\n')
})
