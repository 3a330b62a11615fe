// PgBouncer (Debian's, 1.18) as a child process in front of the PostgreSQL server the tests
// use: a configuration written into a temporary directory, a free port, stopped at teardown.
import { spawn } from 'node:child_process'
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from '../integration/process.js'
import { track } from './children.js'

export interface PgBouncer {
  port: number
  /** postgres:// URL of `database` through the pooler. */
  url: (database: string) => string
  output: () => string
  stop: () => Promise<void>
}

export interface PgBouncerOptions {
  poolMode?: 'transaction' | 'session'
  /** Start-up parameters it accepts and ignores (what is usually done for statement_timeout). */
  ignoreStartupParameters?: string[]
  /** Server connections per database and user. */
  poolSize?: number
  maxClientConnections?: number
}

/** Where `pgbouncer` is: Debian installs it in /usr/sbin, which a non-root PATH may lack. */
export const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((path) => existsSync(path)) ?? 'pgbouncer'

export async function startPgBouncer (t: { teardown: (fn: () => unknown) => void }, options: PgBouncerOptions = {}): Promise<PgBouncer> {
  const server = new URL(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres')
  const user = decodeURIComponent(server.username || 'postgres')
  const password = decodeURIComponent(server.password)
  const dir = mkdtempSync(join(tmpdir(), 'tsb-pgbouncer-'))
  // Run as root, PgBouncer refuses to start; it then runs as nobody (-u), who must read these.
  chmodSync(dir, 0o755)
  const port = await freePort()
  const quote = (value: string) => `"${value.replaceAll('"', '""')}"`
  writeFileSync(join(dir, 'users.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 })
  writeFileSync(join(dir, 'pgbouncer.ini'), [
    '[databases]',
    `* = host=${server.hostname} port=${server.port || 5432}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${join(dir, 'users.txt')}`,
    `pool_mode = ${options.poolMode ?? 'transaction'}`,
    `default_pool_size = ${options.poolSize ?? 20}`,
    `max_client_conn = ${options.maxClientConnections ?? 200}`,
    ...(options.ignoreStartupParameters ? [`ignore_startup_parameters = ${options.ignoreStartupParameters.join(',')}`] : []),
    'log_connections = 0',
    'log_disconnections = 0',
    ''
  ].join('\n'), { mode: 0o644 })

  const asRoot = process.getuid?.() === 0
  const child = track(spawn(PGBOUNCER, [...(asRoot ? ['-u', 'nobody'] : []), join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'pipe', 'pipe'] }))
  let output = ''
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
    rmSync(dir, { recursive: true, force: true })
  }
  t.teardown(stop)
  const deadline = Date.now() + 15_000
  while (!output.includes('process up')) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`pgbouncer did not start: ${output}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return {
    port,
    url: (database) => {
      const url = new URL(server)
      url.port = String(port)
      url.hostname = '127.0.0.1'
      url.pathname = `/${database}`
      return url.toString()
    },
    output: () => output,
    stop
  }
}
