// The service as production runs it: a clean build, then the compiled server started with
// NODE_ENV=production, LOG_LEVEL=warn and the node flags of `npm start`, on the benchmark's
// database, with the event-loop probe preloaded. Also what the benchmark watches in it:
// RSS, event-loop delay, idleness, and the warnings it logs.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { copyFileSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { CleanUps } from './cleanup.js'
import { processTicks } from './cpu.js'
import { databaseEnv, type BenchDatabase } from './database.js'
import { log } from './log.js'
import { BENCH_DIR, ROOT } from './paths.js'
import { freePort, RssSampler, sleep, startProcess, waitForHttp, type Managed } from './proc.js'
import { openPglite, openPostgres, PRICE_ID, type Sql } from './seed.js'
import { WEBHOOK_SECRET } from './webhooks.js'
import { productionNodeFlags } from '../production-flags.js'

const PROBE = path.join(BENCH_DIR, 'event-loop-probe.js')
const APP_URL = 'http://localhost:3000'
const API_URL = 'http://localhost:3002'
const JWT_SECRET = randomBytes(48).toString('base64url')

/** The minimal environment of every child: nothing of the caller's service configuration leaks in. */
export function baseEnv (): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const key of ['PATH', 'HOME', 'TMPDIR', 'LANG', 'TZ', 'SYSTEMROOT']) {
    if (process.env[key] !== undefined) env[key] = process.env[key]
  }
  return env
}

/** What the service's tokens depend on: a ceiling that checks them needs the same. */
export const tokenEnv = (): NodeJS.ProcessEnv => ({ AUTH_JWT_SECRET: JWT_SECRET, APP_URL, API_URL })

/**
 * The build's compiler run (`tsc -p tsconfig.build.json`) into a fresh directory of its own
 * (with the project's package.json and a link to its node_modules): a clean build, so files
 * deleted from the source cannot linger in the output, and the project's own dist/ (which
 * `npm run build` would delete first) is left alone. Returns that directory.
 */
export async function build (cleanups: CleanUps): Promise<string> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-build-'))
  cleanups.add(() => rmSync(dir, { recursive: true, force: true }))
  copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'))
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir')
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json', '--outDir', path.join(dir, 'dist')], { cwd: ROOT, stdio: 'inherit' })
    child.on('exit', (code) => code === 0 ? resolve() : reject(new Error(`tsc -p tsconfig.build.json failed (${String(code)})`)))
    child.on('error', reject)
  })
  // As `npm run build` does: the embedded database's template, which a fresh directory copies.
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(dir, 'dist', 'scripts', 'embedded-template.js')], { cwd: dir, stdio: 'inherit' })
    child.on('exit', (code) => code === 0 ? resolve() : reject(new Error(`the embedded database template failed (${String(code)})`)))
    child.on('error', reject)
  })
  return dir
}

/** The service ended without being asked to (a crash, or a signal from outside the benchmark). */
export class ServiceDied extends Error {}

/** Event-loop delay over a window, from the probe (ms beyond its 10 ms sampling interval). */
export interface EventLoop { count: number, mean: number, p50: number, p90: number, p99: number, max: number, seq: number }

export interface ServiceConfig {
  /** Where the compiled service lives: a clean build's directory, or the project with --skip-build. */
  root: string
  database: BenchDatabase
  /** Extra environment (--env), over the benchmark's own. */
  extraEnv: Record<string, string>
}

export class Service {
  proc: Managed | undefined
  readonly sampler = new RssSampler()
  port = 0
  url = ''
  private postgresSql: Sql | undefined
  /** Warnings and errors the service logged, over every start. */
  /** Environment over --env, set by restart() (the metrics comparison). */
  private envOverride: Record<string, string> = {}
  readonly logged = new Map<string, { level: string, count: number, example: string }>()
  /** The event-loop probe's Unix socket. */
  private readonly eldSocket: string

  constructor (private readonly config: ServiceConfig, cleanups: CleanUps) {
    this.eldSocket = path.join(mkdtempSync(path.join(os.tmpdir(), 'bench-eld-')), 'probe.sock')
    cleanups.add(() => rmSync(path.dirname(this.eldSocket), { recursive: true, force: true }))
    cleanups.add(() => this.closeSql())
    cleanups.add(() => this.stop())
  }

  get database (): BenchDatabase {
    return this.config.database
  }

  /** Where the compiled service lives. */
  get root (): string {
    return this.config.root
  }

  env (): NodeJS.ProcessEnv {
    return {
      ...baseEnv(),
      NODE_ENV: 'production',
      LOG_LEVEL: 'warn',
      HOST: '127.0.0.1',
      PORT: String(this.port),
      ...tokenEnv(),
      ...databaseEnv(this.config.database),
      // Lifted for the benchmark only (0 = disabled).
      RATE_LIMIT_MAX: '0',
      AUTH_RATE_LIMIT_MAX: '0',
      // Counted still (the count is part of a key's cost), but never reached.
      API_KEY_RATE_LIMIT_MAX: '1000000000',
      // Every client of the benchmark is on 127.0.0.1: the login overload opens 128 connections.
      MAX_CONNECTIONS_PER_ADDRESS: '1000',
      PAYMENT_SECRET_KEY: 'sk_test_bench',
      PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
      PAYMENT_PRICE_IDS: PRICE_ID,
      BENCH_ELD_SOCKET: this.eldSocket,
      ...this.config.extraEnv,
      ...this.envOverride
    }
  }

  /** Stops the service and starts it again with `env` over its environment (replacing an earlier restart's). */
  async restart (env: Record<string, string>): Promise<void> {
    // Requests the load generator abandoned at the end of a run finish first.
    await this.waitIdle()
    await this.stop()
    this.envOverride = env
    await this.start()
  }

  async start (nodeArgs: string[] = []): Promise<void> {
    if (this.port === 0) {
      this.port = await freePort()
      this.url = `http://127.0.0.1:${this.port}`
    }
    rmSync(this.eldSocket, { force: true })
    // As `npm start` runs it: the same node flags, then dist/server.js (with the probe preloaded).
    const root = this.config.root
    this.proc = startProcess('service', process.execPath,
      [...productionNodeFlags(ROOT), '--import', pathToFileURL(PROBE).href, ...nodeArgs, path.join(root, 'dist', 'server.js')],
      { env: this.env(), cwd: root })
    await waitForHttp(`${this.url}/health`, this.proc, 120_000)
    this.sampler.attach(this.proc.pid)
  }

  /** Starts the service: ms to its first /health 200. */
  async timedStart (): Promise<number> {
    const t = Date.now()
    await this.start()
    return Date.now() - t
  }

  /** Stops the service and starts it again on the same database (its schema now current): ms to the first /health 200. */
  async timedRestart (): Promise<number> {
    await this.waitIdle()
    await this.stop()
    return this.timedStart()
  }

  async stop (): Promise<void> {
    const proc = this.proc
    if (proc === undefined) return
    this.proc = undefined
    const code = await proc.stop()
    if (code !== 0) log(`  (service exited with ${String(code)})`)
    for (const [key, entry] of proc.output.summary.byMessage) {
      const kept = this.logged.get(key)
      if (kept) kept.count += entry.count
      else this.logged.set(key, { ...entry })
    }
  }

  alive (): boolean {
    return this.proc !== undefined && !this.proc.hasExited()
  }

  /**
   * Runs `fn` with a direct database connection. The embedded database admits one
   * process, so for PGlite the service is stopped meanwhile and started again after.
   */
  async withSql<T> (fn: (sql: Sql) => Promise<T>): Promise<T> {
    const { url, dataDir } = this.config.database
    if (url !== undefined) {
      this.postgresSql ??= await openPostgres(url)
      return fn(this.postgresSql)
    }
    const running = this.proc !== undefined
    if (running) await this.stop()
    const sql = await openPglite(dataDir!)
    try {
      return await fn(sql)
    } finally {
      await sql.close()
      if (running) await this.start()
    }
  }

  async closeSql (): Promise<void> {
    await this.postgresSql?.close()
    this.postgresSql = undefined
  }

  /** Event-loop delay since the previous call (the probe's window), or undefined. */
  async eventLoop (): Promise<EventLoop | undefined> {
    if (!this.alive()) return undefined
    return new Promise((resolve) => {
      let text = ''
      const socket = net.connect(this.eldSocket)
      socket.setTimeout(5000, () => socket.destroy())
      socket.on('data', (chunk: Buffer) => { text += chunk.toString() })
      socket.on('close', () => {
        try { resolve(JSON.parse(text) as EventLoop) } catch { resolve(undefined) }
      })
      socket.on('error', () => resolve(undefined))
    })
  }

  /** Waits until the service uses under 15 % of a core (work left from a run, e.g. queued logins). */
  async waitIdle (maxMs = 90_000): Promise<void> {
    if (!this.alive()) return
    const ticks = () => processTicks(this.proc!.pid) ?? NaN
    const deadline = Date.now() + maxMs
    while (Date.now() < deadline) {
      const before = ticks()
      await sleep(500)
      const used = (ticks() - before) / 100 / 0.5
      if (!(used >= 0.15)) return
    }
  }
}
