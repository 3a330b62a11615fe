// The image and the compose file run what the README promises. No Docker engine runs where the
// tests run, so this checks what can be checked without one: the runtime stage's data
// directory, its health check (run here as the engine would run it), the migrate command's
// build output and dependencies, compose's mail settings, and secrets kept out of git and
// the image.
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { builtinModules } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { PROJECT_ROOT } from './paths.js'

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
  t.match(read('docker-compose.yml'), `docker compose run --rm api ${command}`, 'so does the compose file')
  t.match(read('docs/operations.md'), command, 'and docs/operations.md')

  // Every module scripts/migrate.ts loads, and the migrations it runs, come from the project or
  // from production dependencies (npm prune --omit=dev removed the rest from the image).
  const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> }
  const seen = new Set<string>()
  const packages = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    // Static imports and re-exports that stay at run time (not `import type`).
    for (const [, specifier] of read(file).matchAll(/^(?:import|export)\s+(?!type\s)(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)) {
      if (specifier!.startsWith('.')) visit(relative(PROJECT_ROOT, resolve(PROJECT_ROOT, dirname(file), specifier!.replace(/\.js$/, '.ts'))))
      else packages.add(specifier!.startsWith('@') ? specifier!.split('/').slice(0, 2).join('/') : specifier!.split('/')[0]!)
    }
  }
  // The database's thread and a fresh directory's initialiser are loaded by path, not imported.
  for (const root of ['scripts/migrate.ts', 'db/pglite.worker.ts', 'db/pglite-init.ts']) visit(root)
  for (const migration of readdirSync(join(PROJECT_ROOT, 'db/migrations'))) visit(`db/migrations/${migration}`)
  t.ok(seen.has('db/connect.ts') && seen.has('db/pglite-thread.ts'), 'the walk follows the imports')
  t.ok(['kysely', 'pg', '@electric-sql/pglite', 'env-schema'].every((name) => packages.has(name)), 'to the packages')
  const missing = [...packages].filter((name) => !name.startsWith('node:') && !builtinModules.includes(name) && !(name in pkg.dependencies))
  t.same(missing, [], 'no dev dependency on the way')
})

t.test('compose passes the mail settings: without them no reset or verification mail is ever sent', async (t) => {
  const compose = parse(read('docker-compose.yml')) as { services: { api: { environment: Record<string, string> } } }
  const environment = compose.services.api.environment
  // Passed from .env or the environment; empty (unset) is allowed, the service then queues mail.
  t.match(environment.SMTP_URL, /^\$\{SMTP_URL(:-)?\}$/)
  t.match(environment.EMAIL_FROM, /^\$\{EMAIL_FROM(:-)?\}$/)
})

t.test('.env, where compose reads the secrets from, is ignored by git and kept out of the image', async (t) => {
  for (const file of ['.env', '.env.production']) {
    const ignored = await execFileAsync('git', ['check-ignore', '--no-index', '-q', file], { cwd: PROJECT_ROOT }).then(() => true, () => false)
    t.ok(ignored, `git ignores ${file}`)
  }
  const dockerIgnored = read('.dockerignore').split('\n').map((line) => line.trim())
  t.ok(dockerIgnored.includes('.env') && dockerIgnored.includes('.env.*'), '.dockerignore lists .env and .env.*')
})
