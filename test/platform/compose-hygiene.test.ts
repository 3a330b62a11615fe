// docker-compose.yml's hygiene (issue 31, point 7), checked without a Docker engine: no database
// password in the repository, ports on loopback unless asked, every pulled image pinned by an
// exact tag and its digest, PgBouncer's health check that the instances wait for; and the two
// scripts behind them (deploy/pgbouncer-start.sh, deploy/check-image-digests.sh) run here
// against stand-in `pgbouncer` and `docker` commands. deploy/README.md says why each.
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { PROJECT_ROOT } from '../support/paths.js'

interface Service {
  image?: string
  build?: unknown
  environment?: Record<string, string>
  ports?: string[]
  depends_on?: Record<string, { condition: string }> | string[]
  healthcheck?: { test: string[] }
}

const read = (file: string) => readFileSync(join(PROJECT_ROOT, file), 'utf8')
const { services } = parse(read('docker-compose.yml'), { merge: true }) as { services: Record<string, Service> }
const instances = Object.keys(services).filter((name) => /^api-\d+$/.test(name))
const dockerfiles = ['Dockerfile', ...readdirSync(join(PROJECT_ROOT, 'deploy')).filter((f) => f.endsWith('.Dockerfile')).map((f) => `deploy/${f}`)]
/** `${POSTGRES_PASSWORD}`, as compose reads it: the value of that variable. */
const PASSWORD = '$' + '{POSTGRES_PASSWORD}'
const fromLines = (file: string) => [...read(file).matchAll(/^FROM\s+(\S+)/gim)].map((m) => m[1]!)

/** Runs `command` with `args`: its exit code and output. */
const run = (command: string, args: string[], env: Record<string, string>) => new Promise<{ code: number, stdout: string, stderr: string }>((resolve) => {
  execFile(command, args, { cwd: PROJECT_ROOT, env }, (err, stdout, stderr) => {
    resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr })
  })
})

/** An executable shell script `name` in `dir`. */
function script (dir: string, name: string, body: string): void {
  writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`)
  chmodSync(join(dir, name), 0o755)
}

t.test('no database password in the repository: PostgreSQL, PgBouncer and the instances get POSTGRES_PASSWORD, which compose requires', async (t) => {
  t.match(services.postgres!.environment!.POSTGRES_PASSWORD, /^\$\{POSTGRES_PASSWORD:\?[^}]+\}$/, 'required: compose stops, naming it, when it is unset')
  t.equal(services.pgbouncer!.environment!.PGBOUNCER_PASSWORD, PASSWORD)
  for (const name of instances) {
    t.equal(decodeURIComponent(new URL(services[name]!.environment!.DATABASE_URL!).password), PASSWORD, `${name}'s DATABASE_URL`)
  }
  for (const [name, service] of Object.entries(services)) {
    for (const [key, value] of Object.entries(service.environment ?? {})) {
      if (/PASSWORD|SECRET/.test(key)) t.match(value, /^\$\{\w+(:?[-?][^}]*)?\}$/, `${name}'s ${key} comes from the environment`)
    }
  }
  t.match(read('deploy/pgbouncer.ini'), /^auth_file = \/run\/pgbouncer\/userlist\.txt$/m, 'PgBouncer\'s auth file is written when it starts, not kept')
  t.same(readdirSync(join(PROJECT_ROOT, 'deploy')).filter((file) => /userlist/.test(file)), [], 'and no auth file is in deploy/')
  const example = read('.env.example')
  for (const name of ['POSTGRES_PASSWORD', 'PUBLISH_ADDRESS']) t.match(example, new RegExp(`^#\\s+${name}=`, 'm'), `.env.example names ${name}`)
})

t.test('published ports are on 127.0.0.1 unless PUBLISH_ADDRESS asks otherwise', async (t) => {
  const published = Object.entries(services).flatMap(([name, service]) => (service.ports ?? []).map((port) => [name, port] as const))
  t.ok(published.length >= 2, 'the balancer and the mail catcher\'s inbox')
  for (const [name, port] of published) t.match(port, /^\$\{PUBLISH_ADDRESS:-127\.0\.0\.1\}:\d+:\d+$/, name)
})

t.test('every image pulled has an exact tag and is pinned by digest; built ones are tagged', async (t) => {
  // Mailpit is no official image: repo-info records no digest of it (deploy/README.md, Images).
  const digestPending = new Set(['axllent/mailpit'])
  const pulled = [
    ...Object.entries(services).filter(([, s]) => s.build === undefined).map(([name, s]) => [name, s.image ?? ''] as const),
    ...dockerfiles.flatMap((file) => fromLines(file).map((image) => [file, image] as const))
  ]
  const readme = read('deploy/README.md')
  for (const [where, image] of pulled) {
    const [, name, tag, digest] = /^([\w./-]+):([\w.-]+?)(?:@(sha256:[0-9a-f]{64}))?$/.exec(image) ?? []
    // The service's own Dockerfile is not held here: deploy/README.md lists its base as not pinned yet.
    if (where === 'Dockerfile') continue
    t.match(tag, /\d+\.\d+|\d{8}/, `${where}: ${image} has an exact tag: a version or a build date (not latest, not a major alone)`)
    if (digestPending.has(name!)) t.equal(digest, undefined, `${where}: ${name} is the known exception`)
    else t.ok(digest, `${where}: ${image} is pinned by digest`)
    t.ok(readme.includes(`\`${image}\``), `deploy/README.md lists ${image}`)
  }
  for (const [name, service] of Object.entries(services).filter(([, s]) => s.build !== undefined)) {
    t.match(service.image, /^[\w.-]+:[\w.-]+$/, `${name}: the image built is named and tagged`)
  }
})

t.test('PgBouncer has a health check, on its port, and every instance waits for it', async (t) => {
  for (const name of instances) t.same((services[name]!.depends_on as Record<string, unknown>).pgbouncer, { condition: 'service_healthy' }, name)
  t.same((services.pgbouncer!.depends_on as Record<string, unknown>).postgres, { condition: 'service_healthy' }, 'and PgBouncer for PostgreSQL')
  t.ok(services.postgres!.healthcheck, 'which has its own')

  const [kind, ...command] = services.pgbouncer!.healthcheck!.test
  t.equal(kind, 'CMD')
  const listenPort = /^listen_port = (\d+)$/m.exec(read('deploy/pgbouncer.ini'))?.[1]
  t.match(command.join(' '), `/dev/tcp/127.0.0.1/${listenPort}`, 'it checks the port pgbouncer.ini listens on')
  // Run here as the engine would, on another port: healthy while something listens, not after.
  const listener = createServer((socket) => socket.end()).listen(0, '127.0.0.1')
  await once(listener, 'listening')
  const port = String((listener.address() as { port: number }).port)
  const check = () => run(command[0]!, command.slice(1).map((arg) => arg.replace(`/${listenPort}`, `/${port}`)), { PATH: process.env.PATH ?? '' })
  t.equal((await check()).code, 0, 'healthy while PgBouncer listens')
  listener.close()
  await once(listener, 'close')
  t.not((await check()).code, 0, 'unhealthy when nothing does')
})

t.test('deploy/pgbouncer-start.sh writes the auth file from the environment, then becomes PgBouncer', async (t) => {
  const dir = t.testdir({ bin: {} })
  const authFile = join(dir, 'userlist.txt')
  script(join(dir, 'bin'), 'pgbouncer', 'echo "pgbouncer $*"; cat "$PGBOUNCER_AUTH_FILE"')
  const env = { PATH: `${join(dir, 'bin')}:${process.env.PATH ?? ''}`, PGBOUNCER_AUTH_FILE: authFile, PGBOUNCER_USER: 'tasks' }
  const started = await run('sh', ['deploy/pgbouncer-start.sh'], { ...env, PGBOUNCER_PASSWORD: 'a "quoted" pass' })
  t.equal(started.code, 0, started.stderr)
  t.equal(started.stdout, 'pgbouncer /etc/pgbouncer/pgbouncer.ini\n"tasks" "a ""quoted"" pass"\n', 'PgBouncer\'s quoting, a quote doubled')
  t.equal(statSync(authFile).mode & 0o777, 0o600, 'readable by PgBouncer\'s user only')
  t.match(read('deploy/pgbouncer-start.sh'), /\$\{PGBOUNCER_AUTH_FILE:-\/run\/pgbouncer\/userlist\.txt\}/, 'by default where pgbouncer.ini reads it')
  const missing = await run('sh', ['deploy/pgbouncer-start.sh'], env)
  t.not(missing.code, 0, 'without a password it does not start')
  t.match(missing.stderr, /PGBOUNCER_PASSWORD must be set/)
})

t.test('deploy/check-image-digests.sh: each pulled image ok, moved or unpinned, against a stand-in docker', async (t) => {
  const dir = t.testdir({ bin: {} })
  const pinned = [...Object.values(services).map((s) => s.image ?? ''), ...dockerfiles.flatMap(fromLines)].filter((ref) => ref.includes('@'))
  const moved = pinned.find((ref) => ref.startsWith('postgres:'))!.split('@')[0]!
  // What the registry answers: the pinned digest for each pinned tag but postgres's, a new one for it and the unpinned.
  const digests = [...pinned.filter((ref) => !ref.startsWith(`${moved}@`)).map((ref) => ref.replace('@', ' ')),
    `${moved} sha256:${'1'.repeat(64)}`, `axllent/mailpit:v1.30.5 sha256:${'2'.repeat(64)}`, `node:24-bookworm-slim sha256:${'3'.repeat(64)}`]
  writeFileSync(join(dir, 'digests.txt'), `${digests.join('\n')}\n`)
  mkdirSync(join(dir, 'bin'), { recursive: true })
  script(join(dir, 'bin'), 'docker', `[ "$1 $2 $3 $5" = "buildx imagetools inspect --format" ] || exit 2\nawk -v image="$4" '$1 == image { print $2 }' "${join(dir, 'digests.txt')}"`)

  const checked = await run('sh', ['deploy/check-image-digests.sh'], { PATH: `${join(dir, 'bin')}:${process.env.PATH ?? ''}` })
  t.equal(checked.code, 1, 'not every image is ok', { stderr: checked.stderr })
  const lines = checked.stdout.trim().split('\n').sort()
  t.same(lines, [
    `MOVED    ${moved}: pinned ${pinned.find((ref) => ref.startsWith(`${moved}@`))!.split('@')[1]}, the tag names sha256:${'1'.repeat(64)} now`,
    `UNPINNED axllent/mailpit:v1.30.5: pin axllent/mailpit:v1.30.5@sha256:${'2'.repeat(64)}`,
    `UNPINNED node:24-bookworm-slim: pin node:24-bookworm-slim@sha256:${'3'.repeat(64)}`,
    ...pinned.filter((ref) => !ref.startsWith(`${moved}@`)).map((ref) => `ok       ${ref}`)
  ].sort(), 'one line per image, built ones left out')
})
