// HAProxy (Debian's, 2.6) as a child process running deploy/haproxy.cfg, its addresses given
// through the environment as the file expects; the retry policy can be changed for a phase of
// the test (the file's own lines are replaced, and each must be found). Its stats page, read as
// CSV, says what the balancer thinks of each instance.
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from '../integration/process.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { track } from './children.js'

export const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((path) => existsSync(path)) ?? 'haproxy'

/**
 * `deploy`: the file as it is (refused connections retried on another instance; a request
 * whose connection closed without an answer retried only for reads and writes carrying an
 * Idempotency-Key). `none`: no retry of any kind, so the instances' own shutdown is what is
 * tested. `post`: plain POSTs retried too when their connection closed without an answer, as a
 * balancer set to retry everything retryable does.
 */
export type RetryPolicy = 'deploy' | 'none' | 'post'

const RETRIES = '    retries 2\n'
const RETRY_ON = '    retry-on conn-failure empty-response\n'
const WRITES_NOT_RETRIED = '    http-request disable-l7-retry unless METH_GET || METH_HEAD || { req.hdr(idempotency-key) -m found }\n'

function replaceOnce (text: string, line: string, by: string): string {
  const at = text.indexOf(line)
  if (at === -1 || text.indexOf(line, at + 1) !== -1) throw new Error(`deploy/haproxy.cfg: expected exactly one line ${JSON.stringify(line.trim())}`)
  return text.slice(0, at) + by + text.slice(at + line.length)
}

export function haproxyConfig (policy: RetryPolicy): string {
  const text = readFileSync(join(PROJECT_ROOT, 'deploy/haproxy.cfg'), 'utf8')
  for (const line of [RETRIES, RETRY_ON, WRITES_NOT_RETRIED]) replaceOnce(text, line, line)
  if (policy === 'none') return replaceOnce(replaceOnce(text, RETRIES, '    retries 0\n'), RETRY_ON, '    retry-on none\n')
  if (policy === 'post') return replaceOnce(text, WRITES_NOT_RETRIED, '')
  return text
}

export interface ServerState {
  name: string
  /** UP, DOWN, `UP 1/2` (going down), `DOWN 1/2` (coming up), MAINT, … */
  status: string
  /** Requests (sessions) it was given. */
  total: number
}

export interface Haproxy {
  port: number
  policy: RetryPolicy
  servers: () => Promise<ServerState[]>
  /** Polls the stats every 50 ms until `name`'s status is exactly `status`; resolves with the time it was seen. */
  waitFor: (name: string, status: 'UP' | 'DOWN', timeoutMs?: number) => Promise<number>
  /** Its log lines for requests that did not end well (an error status, or a session cut short). */
  troubles: () => string[]
  /** Those lines counted by instance, status and termination flags (e.g. `api-2 502 SH--`; `<NOSRV>`: no instance was up). */
  troubleCounts: () => Record<string, number>
  stop: () => Promise<void>
}

export async function startHaproxy (t: { teardown: (fn: () => unknown) => void }, servers: number[], policy: RetryPolicy): Promise<Haproxy> {
  if (servers.length !== 3) throw new Error('deploy/haproxy.cfg names three instances')
  const dir = mkdtempSync(join(tmpdir(), 'tsb-haproxy-'))
  const file = join(dir, 'haproxy.cfg')
  writeFileSync(file, haproxyConfig(policy))
  const port = await freePort()
  const statsPort = await freePort()
  const env = {
    PATH: process.env.PATH ?? '',
    HAPROXY_BIND: `127.0.0.1:${port}`,
    HAPROXY_STATS_BIND: `127.0.0.1:${statsPort}`,
    API_1: `127.0.0.1:${servers[0]}`,
    API_2: `127.0.0.1:${servers[1]}`,
    API_3: `127.0.0.1:${servers[2]}`
  }
  // -db: in the foreground, logging to its stdout.
  const child = track(spawn(HAPROXY, ['-db', '-f', file], { env, stdio: ['ignore', 'pipe', 'pipe'] }))
  const troubles: string[] = []
  let startup = ''
  let partial = ''
  const read = (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      if (startup.length < 20_000) startup += line + '\n'
      // httplog: "… backend/server Tq/Tw/Tc/Tr/Ta status bytes - - FLAGS …": a 5xx, or a session
      // that did not end normally (its termination flags are not ----).
      if (/ (-1|[1-5]\d\d) \d+ - - /.test(line) && (/ (-1|5\d\d) \d+ - - /.test(line) || !/ \d{3} \d+ - - ---- /.test(line))) troubles.push(line)
    }
  }
  child.stdout.on('data', read)
  child.stderr.on('data', read)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
    rmSync(dir, { recursive: true, force: true })
  }
  t.teardown(stop)

  const servers_ = async (): Promise<ServerState[]> => {
    const res = await fetch(`http://127.0.0.1:${statsPort}/stats;csv`)
    const [header = '', ...rows] = (await res.text()).trim().split('\n')
    const columns = header.replace(/^# /, '').split(',')
    const at = (name: string) => columns.indexOf(name)
    return rows.map((row) => row.split(',')).filter((cells) => cells[at('pxname')] === 'api' && cells[at('svname')]!.startsWith('api-'))
      .map((cells) => ({ name: cells[at('svname')]!, status: cells[at('status')]!, total: Number(cells[at('stot')]) }))
  }
  const waitFor = async (name: string, status: 'UP' | 'DOWN', timeoutMs = 60_000): Promise<number> => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const server = (await servers_().catch(() => [])).find((s) => s.name === name)
      if (server?.status === status) return Date.now()
      if (child.exitCode !== null) throw new Error(`haproxy exited: ${startup}`)
      if (Date.now() > deadline) throw new Error(`haproxy: ${name} not ${status} within ${timeoutMs} ms (${server?.status ?? 'unknown'})`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  const deadline = Date.now() + 15_000
  while (await fetch(`http://127.0.0.1:${statsPort}/stats;csv`).then(() => false, () => true)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`haproxy did not start: ${startup}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const troubleCounts = () => {
    const counts: Record<string, number> = {}
    for (const line of troubles) {
      const m = / api\/(\S+) \S+ (-1|\d{3}) \d+ - - (\S{4}) /.exec(line)
      const key = m ? `${m[1]} ${m[2]} ${m[3]}` : 'other'
      counts[key] = (counts[key] ?? 0) + 1
    }
    return counts
  }
  return { port, policy, servers: servers_, waitFor, troubles: () => troubles, troubleCounts, stop }
}
