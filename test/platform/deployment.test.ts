// The image and the compose file run what the README promises. No Docker engine runs where the
// tests run, so this checks what can be checked without one: the runtime stage's data
// directory, its health check (run here as the engine would run it), the migrate command's
// build output and dependencies, the fleet compose describes and the settings of its balancer
// and pooler against the service's own, and secrets kept out of git and the image (read from the
// ignore files, not asked of git: the suite runs from a tarball or a build context too, without .git).
// (npm run test:fleet runs deploy/haproxy.cfg itself, under load.)
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { builtinModules } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { ConfigSchema } from '../../config.js'
import { PROJECT_ROOT } from '../support/paths.js'

const execFileAsync = promisify(execFile)
const read = (file: string) => readFileSync(join(PROJECT_ROOT, file), 'utf8')

/** The Dockerfile's instructions of its last stage (the image that runs), continuations joined. */
function runtimeStage (): Array<{ keyword: string, args: string }> {
  const instructions = read('Dockerfile').replace(/\\\n/g, ' ').split('\n')
    .map((line) => line.trim()).filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const [keyword = '', ...rest] = line.split(/\s+/)
      return { keyword: keyword.toUpperCase(), args: rest.join(' ') }
    })
  const from = instructions.map((i) => i.keyword).lastIndexOf('FROM')
  return instructions.slice(from + 1)
}

t.test('the image: DATA_DIR is created for the user the service runs as, before it runs as that user, and is a volume', async (t) => {
  const stage = runtimeStage()
  const env = Object.fromEntries(stage.filter((i) => i.keyword === 'ENV').flatMap((i) => [...i.args.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1], m[2]])))
  const workdir = stage.findLast((i) => i.keyword === 'WORKDIR')?.args ?? '/'
  const dataDir = resolve(workdir, env.DATA_DIR ?? './.data')
  const user = stage.findLast((i) => i.keyword === 'USER')?.args
  t.equal(user, 'node', 'runs as node, not root')

  const userAt = stage.findIndex((i) => i.keyword === 'USER')
  const prepared = stage.slice(0, userAt).filter((i) => i.keyword === 'RUN').map((i) => i.args).join(' && ')
  t.match(prepared, new RegExp(`mkdir -p ${dataDir}(\\s|$)`), `${dataDir} is created while still root`)
  t.match(prepared, new RegExp(`chown (-R )?node(:node)? ${dataDir}(\\s|$)`), 'and given to node')

  const volumes = stage.filter((i) => i.keyword === 'VOLUME')
    .flatMap((i) => i.args.startsWith('[') ? JSON.parse(i.args) as string[] : i.args.split(/\s+/))
  t.same(volumes, [dataDir], 'the data directory is a volume: the embedded database outlives the container')
})

t.test('the image\'s health check follows PORT: run as the engine runs it, against a server on another port', async (t) => {
  const healthcheck = runtimeStage().find((i) => i.keyword === 'HEALTHCHECK')?.args ?? ''
  const command = /(?:^|\s)CMD\s+(.*)$/.exec(healthcheck)?.[1] ?? ''
  t.not(command, '', 'a HEALTHCHECK with a command')
  t.notOk(command.startsWith('['), 'in shell form, so it reads the environment')

  let status = 200
  const health = createServer((request, response) => {
    response.statusCode = request.url === '/health' ? status : 404
    response.end()
  }).listen(0, '127.0.0.1')
  await once(health, 'listening')
  t.teardown(() => health.close())
  const port = (health.address() as { port: number }).port
  const check = () => execFileAsync('/bin/sh', ['-c', command], { env: { PATH: process.env.PATH ?? '', PORT: String(port) } })
    .then(() => 0, (err: { code?: number }) => err.code)

  t.equal(await check(), 0, `healthy when /health on PORT=${port} answers 200`)
  status = 503
  t.equal(await check(), 1, 'unhealthy when it answers 503')
})

t.test('migrations run in the image without dev dependencies: node dist/scripts/migrate.js', async (t) => {
  const command = 'node dist/scripts/migrate.js'
  // What tsconfig.build.json compiles scripts/migrate.ts to.
  const build = JSON.parse(read('tsconfig.build.json')) as { include: string[], exclude?: string[], compilerOptions?: { outDir?: string, rootDir?: string } }
  const base = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string, rootDir: string } }
  const included = build.include.some((entry) => entry === 'scripts' || entry === 'scripts/migrate.ts') && !(build.exclude ?? []).includes('scripts/migrate.ts')
  t.ok(included, 'the build compiles scripts/migrate.ts')
  const outDir = build.compilerOptions?.outDir ?? base.compilerOptions.outDir
  const rootDir = build.compilerOptions?.rootDir ?? base.compilerOptions.rootDir
  t.equal(join(outDir, relative(rootDir, 'scripts/migrate.js')), 'dist/scripts/migrate.js')
  t.ok(runtimeStage().some((i) => i.keyword === 'COPY' && / \/app\/dist \.\/dist$/.test(i.args)), 'the image has dist/')
  t.match(read('Dockerfile'), command, 'the Dockerfile says how to run it')
  t.match(read('docker-compose.yml'), `docker compose run --rm api-1 ${command}`, 'so does the compose file')
  t.match(read('docs/operations.md'), command, 'and docs/operations.md')

  // Every module scripts/migrate.ts loads, and the migrations it runs, come from the project or
  // from production dependencies (npm prune --omit=dev removed the rest from the image).
  const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> }
  const seen = new Set<string>()
  const packages = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    // Static imports and re-exports that stay at run time (not `import type`), and require()s
    // of a literal name (db/engine/pg.ts loads the driver so).
    const text = read(file)
    const specifiers = [
      ...[...text.matchAll(/^(?:import|export)\s+(?!type\s)(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)].map((m) => m[1]),
      ...[...text.matchAll(/\brequire\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1])
    ]
    for (const specifier of specifiers) {
      if (specifier!.startsWith('.')) visit(relative(PROJECT_ROOT, resolve(PROJECT_ROOT, dirname(file), specifier!.replace(/\.js$/, '.ts'))))
      else packages.add(specifier!.startsWith('@') ? specifier!.split('/').slice(0, 2).join('/') : specifier!.split('/')[0]!)
    }
  }
  // The database's thread and a fresh directory's initialiser are loaded by path, not imported.
  for (const root of ['scripts/migrate.ts', 'db/engine/pglite.worker.ts', 'db/engine/pglite-init.ts']) visit(root)
  for (const migration of readdirSync(join(PROJECT_ROOT, 'db/migrations'))) visit(`db/migrations/${migration}`)
  t.ok(seen.has('db/engine/connect.ts') && seen.has('db/engine/pglite-thread.ts'), 'the walk follows the imports')
  t.ok(['kysely', 'pg', '@electric-sql/pglite', 'ajv'].every((name) => packages.has(name)), 'to the packages')
  const missing = [...packages].filter((name) => !name.startsWith('node:') && !builtinModules.includes(name) && !(name in pkg.dependencies))
  t.same(missing, [], 'no dev dependency on the way')
})

interface ComposeService {
  image?: string
  build?: unknown
  environment?: Record<string, string>
  ports?: string[]
  volumes?: string[]
  depends_on?: unknown
  stop_grace_period?: string
}
const compose = () => parse(read('docker-compose.yml'), { merge: true }) as { services: Record<string, ComposeService> }
const defaults = ConfigSchema.properties as unknown as Record<string, { default?: number }>
const seconds = (value: string) => Number(/^(\d+)s$/.exec(value)?.[1] ?? NaN) * 1000

t.test('compose runs the fleet: a balancer, three like instances behind it, PgBouncer, PostgreSQL, Redis, a mail catcher', async (t) => {
  const { services } = compose()
  t.same(Object.keys(services).sort(), ['api-1', 'api-2', 'api-3', 'balancer', 'mailpit', 'pgbouncer', 'postgres', 'redis'])
  const [first, ...others] = ['api-1', 'api-2', 'api-3'].map((name) => services[name]!)
  for (const other of others) t.same(other, first, 'the instances are configured alike')
  const env = first!.environment!
  t.match(env, { DATABASE_POOLER: 'transaction', DATABASE_PREPARED_STATEMENTS: 'false', TRUST_PROXY: '1', REDIS_URL: 'redis://redis:6379' })
  t.equal(new URL(env.DATABASE_URL!).host, 'pgbouncer:6432', 'PostgreSQL through PgBouncer')
  t.match(env.API_URL, /^\$\{API_URL:-http:\/\/localhost:8080\}$/, 'one token audience for the fleet: the balancer\'s address')
  // Mail goes to the catcher unless SMTP_URL says otherwise; empty (unset) EMAIL_FROM is the default sender.
  t.match(env.SMTP_URL, /^\$\{SMTP_URL:-smtp:\/\/mailpit:1025\}$/)
  t.match(env.EMAIL_FROM, /^\$\{EMAIL_FROM(:-)?\}$/)
  const drain = defaults.SHUTDOWN_DRAIN_MS!.default!
  t.ok(seconds(first!.stop_grace_period!) >= 3 * drain + 10_000, 'docker stop waits for the longest drain and the close after it')
})

t.test('deploy/haproxy.cfg matches compose and the service\'s settings', async (t) => {
  const cfg = read('deploy/haproxy.cfg')
  const line = (pattern: RegExp) => cfg.split('\n').map((l) => pattern.exec(l.trim())).filter((m) => m !== null)
  const { services } = compose()
  t.same(services.balancer!.volumes, ['./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro'])
  const servers = line(/^server (\S+) "\$\{\w+-([\w-]+):(\d+)\}"$/)
  t.same(servers.map((m) => m[1]), ['api-1', 'api-2', 'api-3'], 'one server line per instance')
  const image = runtimeStage().find((i) => i.keyword === 'ENV')?.args ?? ''
  for (const m of servers) {
    t.ok(services[m[2]!], `${m[1]} defaults to the compose service ${m[2]}`)
    t.equal(m[3], /PORT=(\d+)/.exec(image)?.[1], 'on the image\'s PORT')
  }
  const bind = line(/^bind "\$\{HAPROXY_BIND-:(\d+)\}"$/)
  t.same(services.balancer!.ports, [`\${PUBLISH_ADDRESS:-127.0.0.1}:${bind[0]?.[1]}:${bind[0]?.[1]}`], 'compose publishes the port the balancer listens on (on loopback unless asked)')

  t.same(line(/^http-check send meth GET uri (\S+)/).map((m) => m[1]), ['/ready'], 'readiness, not liveness, is checked')
  const check = line(/^default-server check inter (\d+)ms fall (\d+) rise (\d+)/)[0]!
  t.ok(Number(check[1]) * Number(check[2]) < defaults.SHUTDOWN_DRAIN_MS!.default!, 'an instance is out of rotation before its drain delay ends')
  t.equal(line(/^option forwardfor$/).length, 1, 'X-Forwarded-For appended: what TRUST_PROXY=1 reads')
  const timeout = (name: string) => seconds(line(new RegExp(`^timeout ${name} (\\d+s)$`))[0]?.[1] ?? '')
  t.equal(timeout('http-request'), defaults.REQUEST_TIMEOUT_MS!.default, 'a request must arrive within REQUEST_TIMEOUT_MS, as at the instance')
  t.equal(timeout('server'), defaults.CONNECTION_TIMEOUT_MS!.default, 'an answer may take as long as the instance allows')
  t.equal(timeout('client'), defaults.CONNECTION_TIMEOUT_MS!.default)
  t.ok(timeout('http-keep-alive') < defaults.KEEP_ALIVE_TIMEOUT_MS!.default!, 'idle connections end at the balancer first')
  const maxconn = Number(/ maxconn (\d+)( |$)/.exec(check.input)?.[1])
  t.ok(maxconn >= defaults.DATABASE_POOL_MAX!.default!, 'each instance is given at least as many requests at once as its database pool serves')
  t.ok(timeout('queue') > 0, 'the rest wait in the balancer\'s queue, for a bounded time')
  t.same(line(/^retry-on (.*)$/).map((m) => m[1]), ['conn-failure empty-response'])
  t.same(line(/^http-request disable-l7-retry (.*)$/).map((m) => m[1]), ['unless METH_GET || METH_HEAD || { req.hdr(idempotency-key) -m found }'],
    'a POST that may have been done is retried only with an Idempotency-Key')
})

t.test('PgBouncer and PostgreSQL in compose: transaction mode, nothing dropped, the timeout on the role', async (t) => {
  const ini = read('deploy/pgbouncer.ini')
  const setting = (name: string) => new RegExp(`^${name}\\s*=\\s*(.*)$`, 'm').exec(ini)?.[1]?.trim()
  const { services } = compose()
  const url = new URL(services['api-1']!.environment!.DATABASE_URL!)
  t.equal(setting('pool_mode'), 'transaction')
  t.equal(setting('listen_port'), url.port)
  t.match(ini, new RegExp(`^${url.pathname.slice(1)} = host=postgres port=5432 `, 'm'), 'the database, on the postgres service')
  t.equal(setting('ignore_startup_parameters'), undefined, 'no start-up parameter silently dropped')
  t.ok(services.pgbouncer!.volumes!.includes('./deploy/pgbouncer.ini:/etc/pgbouncer/pgbouncer.ini:ro'))
  const role = services.postgres!.environment!.POSTGRES_USER
  const sql = read('deploy/postgres-init.sql')
  const timeout = Number(new RegExp(`^ALTER ROLE ${role} SET statement_timeout = (\\d+);$`, 'm').exec(sql)?.[1])
  t.ok(timeout > 0 && timeout <= defaults.DATABASE_STATEMENT_TIMEOUT_MS!.default!, 'the role carries a statement timeout the service accepts')
  t.ok(services.postgres!.volumes!.some((v) => v.startsWith('./deploy/postgres-init.sql:/docker-entrypoint-initdb.d/')))
})

/** One line of an ignore file as a test of a path relative to the project root. */
interface IgnoreRule { negated: boolean, directoryOnly: boolean, pattern: RegExp }

/**
 * An ignore file's rules, in .gitignore's syntax: `#` comments, `!` to take a path back, `*` and
 * `?` within a name, `**` across folders, a trailing `/` for folders only, and a `/` elsewhere
 * anchoring the pattern at the root (`anchored`: every pattern is, as in .dockerignore).
 * Character classes and escapes other than `\#`, `\!` and `\ ` are not needed by ours.
 */
function ignoreRules (file: string, options: { anchored?: boolean } = {}): IgnoreRule[] {
  return read(file).split('\n').flatMap((raw) => {
    // Git keeps leading spaces and an escaped trailing one; Docker trims both ends.
    const line = options.anchored === true ? raw.trim() : raw.replace(/(?<!\\)\s+$/, '')
    if (line === '' || line.startsWith('#')) return []
    const negated = line.startsWith('!')
    let glob = (negated ? line.slice(1) : line).replace(/\\([#! ])/g, '$1')
    const directoryOnly = glob.endsWith('/')
    glob = glob.replace(/\/+$/, '')
    const anchored = options.anchored === true || glob.includes('/')
    glob = glob.replace(/^\//, '')
    const body = glob.split(/(\*\*\/|\/\*\*$|\*|\?)/).map((part) =>
      part === '**/' ? '(?:.*/)?' : part === '/**' ? '/.*' : part === '*' ? '[^/]*' : part === '?' ? '[^/]' : part.replace(/[.+^${}()|[\]\\]/g, '\\$&')).join('')
    return [{ negated, directoryOnly, pattern: new RegExp(`^${anchored ? '' : '(?:.*/)?'}${body}$`) }]
  })
}

/** Whether the rules leave out `path` (a file): the last rule matching it decides, and nothing in a left-out folder comes back. */
function ignores (rules: IgnoreRule[], path: string): boolean {
  const decide = (candidate: string, isDirectory: boolean) => rules.reduce((ignored, rule) =>
    (!rule.directoryOnly || isDirectory) && rule.pattern.test(candidate) ? !rule.negated : ignored, false)
  const parts = path.split('/')
  return parts.some((_, i) => decide(parts.slice(0, i + 1).join('/'), i < parts.length - 1))
}

t.test('.env, where compose reads the secrets from, is ignored by git and kept out of the image', async (t) => {
  const git = ignoreRules('.gitignore')
  const docker = ignoreRules('.dockerignore', { anchored: true })
  for (const file of ['.env', '.env.production', '.env.local']) {
    t.ok(ignores(git, file), `.gitignore leaves out ${file}`)
    t.ok(ignores(docker, file), `.dockerignore leaves out ${file}`)
  }
  t.notOk(ignores(git, '.env.example'), 'the example, without secrets, stays in git')
  t.ok(ignores(git, 'node_modules/fastify/package.json') && ignores(docker, 'node_modules/fastify/package.json'), 'a left-out folder\'s files are left out')
  t.notOk(ignores(git, 'config.ts') || ignores(docker, 'config.ts'), 'the sources are not')
})
