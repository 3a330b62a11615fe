// docker-compose.yml's own environment starts the service (issue 31, point 1). The compose file is
// rendered as `docker compose` renders it for a user whose .env holds only what it requires, and
// an api instance's environment, on top of the image's ENV, starts the compiled server.js. The
// fleet's other services are swapped for this machine's: PgBouncer for a fresh database on the
// PostgreSQL server (the statement timeout deploy/postgres-init.sql gives compose's role set on
// that database, since the tests connect as the shared postgres), Redis for the local one,
// Mailpit for an SMTP sink.
//
// On c50a5d2 this failed: compose passed PAYMENT_SECRET_KEY as `${PAYMENT_SECRET_KEY:-}`, empty,
// and config.ts refused it ("PAYMENT_SECRET_KEY must NOT have fewer than 1 characters"), so every
// instance exited 1 and restarted in a loop. config.ts now takes an empty value as unset; this
// keeps whatever compose passes, whatever config.ts becomes, a configuration that starts.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { serverDatabase, TEST_SECRET } from '../support/helper.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { freePort, startServer, waitUntilUp } from './process.js'

const read = (file: string) => readFileSync(join(PROJECT_ROOT, file), 'utf8')

/** What a user with the smallest .env compose accepts has set: its required variables only. */
const MINIMAL_ENV = { AUTH_JWT_SECRET: TEST_SECRET, POSTGRES_PASSWORD: 'composepassword' }

/**
 * A string as compose interpolates it: `$$` is `$`; `${NAME}` and `$NAME`; `${NAME:-default}`
 * (unset or empty) and `${NAME-default}` (unset); `${NAME:?message}` and `${NAME?message}`, which
 * stop compose; `${NAME:+other}` and `${NAME+other}`.
 */
function interpolate (text: string, vars: Record<string, string>): string {
  return text.replace(/\$\$|\$\{([A-Za-z_]\w*)(?:(:?)([-?+])([^}]*))?\}|\$([A-Za-z_]\w*)/g, (whole, braced?: string, colon?: string, op?: string, word?: string, bare?: string) => {
    if (whole === '$$') return '$'
    const name = (braced ?? bare)!
    const value = vars[name]
    const missing = value === undefined || (colon === ':' && value === '')
    if (op === '-') return missing ? word! : value!
    if (op === '?') {
      if (missing) throw new Error(`required variable ${name} is missing a value: ${word}`)
      return value!
    }
    if (op === '+') return missing ? '' : word!
    return value ?? ''
  })
}

/** Every string of the compose file interpolated, as compose does before anything starts. */
function render (node: unknown, vars: Record<string, string>): any {
  if (typeof node === 'string') return interpolate(node, vars)
  if (Array.isArray(node)) return node.map((item) => render(item, vars))
  if (node !== null && typeof node === 'object') return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, render(value, vars)]))
  return node
}

const composeFile = () => parse(read('docker-compose.yml'), { merge: true }) as Record<string, unknown>

/** The image's ENV (the Dockerfile's last stage): what an instance has before compose's environment. */
function imageEnv (): Record<string, string> {
  const dockerfile = read('Dockerfile').replace(/\\\n/g, ' ')
  const runtime = dockerfile.slice(dockerfile.search(/^FROM (?![\s\S]*^FROM )/m))
  return Object.fromEntries([...runtime.matchAll(/^ENV (.+)$/gm)].flatMap((m) => [...m[1]!.matchAll(/(\w+)=(\S+)/g)].map((kv) => [kv[1]!, kv[2]!])))
}

t.test('compose needs AUTH_JWT_SECRET and POSTGRES_PASSWORD, and nothing else, to render', async (t) => {
  t.doesNotThrow(() => render(composeFile(), MINIMAL_ENV), 'the minimal .env')
  for (const name of Object.keys(MINIMAL_ENV)) {
    const { [name]: _left, ...others } = MINIMAL_ENV as Record<string, string>
    t.throws(() => render(composeFile(), others), new RegExp(`required variable ${name} is missing`), `without ${name}, compose stops`)
  }
})

t.test('an api instance\'s environment, rendered from a minimal .env, starts server.js and answers /health', async (t) => {
  const { services } = render(composeFile(), MINIMAL_ENV) as { services: Record<string, { environment: Record<string, string> }> }
  const compose = services['api-1']!.environment
  t.equal(compose.PAYMENT_SECRET_KEY, '', 'compose passes the unset optional settings empty')
  t.equal(compose.EMAIL_FROM, '')

  const database = await serverDatabase(t, 'compose')
  const timeout = /^ALTER ROLE \w+ SET statement_timeout = (\d+);$/m.exec(read('deploy/postgres-init.sql'))?.[1]
  t.ok(timeout, 'deploy/postgres-init.sql sets the role\'s statement timeout')
  await database.admin.query(`alter database ${database.name} set statement_timeout = ${timeout}`)
  const sink = await startSmtpSink()
  t.teardown(() => sink.close())

  // compose's services by the name and port an instance reaches them at, and this machine's stand-ins.
  const viaPgBouncer = new URL(compose.DATABASE_URL!)
  t.equal(viaPgBouncer.host, 'pgbouncer:6432', 'compose reaches PostgreSQL through PgBouncer')
  const databaseUrl = new URL(database.url)
  databaseUrl.protocol = viaPgBouncer.protocol
  const swaps: Record<string, string> = {
    DATABASE_URL: databaseUrl.toString(),
    REDIS_URL: compose.REDIS_URL!.replace('//redis:6379', `//${new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379').host}`),
    SMTP_URL: compose.SMTP_URL!.replace('//mailpit:1025', `//127.0.0.1:${sink.port}`)
  }
  const env: Record<string, string> = { ...imageEnv(), ...compose, ...swaps, HOST: '127.0.0.1', PORT: String(await freePort()), DATA_DIR: t.testdir() }
  const serviceNames = Object.keys(services).join('|')
  t.same(Object.entries(env).filter(([, value]) => new RegExp(`//(${serviceNames})[:/]`).test(value)), [], 'no address of a compose service is left')
  t.equal(env.NODE_ENV, 'production', 'the image\'s ENV underneath')

  const server = startServer(env)
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  t.equal((await fetch(`${server.base}/health`)).status, 200)
  t.equal((await fetch(`${server.base}/ready`)).status, 200, 'the database reached, as compose\'s URL says')
  t.notMatch(server.output(), /Invalid configuration/)
})
