// The embedded database in a thread of its own (db/engine/pglite.worker.ts), behind a Kysely
// dialect: the event loop posts each query and gets its rows back, and never runs PostgreSQL
// itself, so health checks and every other request are answered while queries run.
//
// One connection, as PGlite has one session: Kysely serializes its use (the adapter declares
// no multiple connections), so a transaction's statements are never interleaved with another
// request's. A thread that dies, or does not answer a query within queryTimeoutMs (PGlite
// cannot cancel a statement: no statement_timeout without signals), is failed for good:
// every waiting and later query is refused as "database unavailable" and onFatal is told,
// so the server can stop rather than hang.
//
// The directory belongs to this process from before a fresh one is initialised until the
// thread has closed it (db/engine/data-dir-lock.ts): a second process on it refuses to start.
import { execFile, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { cp, readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import type { PGliteOptions } from '@electric-sql/pglite'
import {
  CompiledQuery, PGliteAdapter, PostgresIntrospector, PostgresQueryCompiler,
  type DatabaseConnection, type Dialect, type Driver, type Kysely, type QueryResult, type TransactionSettings
} from 'kysely'
import { DataDirInUseError, lockDataDir, type DataDirLock } from './data-dir-lock.js'
import { usableTemplate } from './embedded-template.js'

/** What the thread is started with (workerData). */
export interface ThreadData {
  dataDir: string
  /** PostgreSQL settings, `name=value`, given at start-up. */
  settings: string[]
  /** PGlite's code, compiled once per process and shared by its threads. */
  wasmModule: WasmModule
  /** PGlite's bundled files (pglite.data), read once per process. */
  fsBundle: Blob
}
/** A query, or (no sql) the request to close the database and end the thread. Ids start at 1. */
export interface ThreadRequest { id: number, sql?: string, params?: readonly unknown[] }
export interface ThreadError { message: string, [field: string]: unknown }
export type ThreadReply =
  | { id: number, rows: unknown[], affectedRows?: number, error?: undefined }
  | { id: number, error: ThreadError }
/**
 * A notification (NOTIFY) to the session, posted as PostgreSQL sends it: when the change that
 * sent it commits, so before the answer to the query that committed it.
 */
export interface ThreadNotice { notice: { channel: string, payload: string } }

export interface PGliteThreadOptions {
  dataDir: string
  settings?: string[]
  /**
   * The template a fresh directory copies instead of initialising, when it is one of this code
   * (db/engine/embedded-template.ts): the build's by default, another directory's, or none.
   */
  template?: string | false
  /** The longest a query may take before the thread is given up as stuck. */
  queryTimeoutMs: number
  /** Told once, when the thread has died or hung; the database stays unavailable after. */
  onFatal?: (err: Error) => void
  /** Each notification on a channel the session listens on, before the answer of the query that committed it. */
  onNotification?: (channel: string, payload: string) => void
}

/** The error of every query once the thread has failed; isDatabaseUnavailable knows its code. */
export class DatabaseThreadError extends Error {
  readonly code = 'PGLITE_THREAD_FAILED'
}

// The worker file (and the initialiser, db/engine/pglite-init) sit beside this one: .js once
// compiled, run as they are; .ts under tsx (development, tests), whose loader does not reach
// worker threads on Node 20, so the code registers tsx's require hook itself and requires
// the file.
const extension = import.meta.url.slice(import.meta.url.lastIndexOf('.'))
const besideThis = (name: string) => new URL(`./${name}${extension}`, import.meta.url)
const tsxRequire = (file: URL) =>
  `require(${JSON.stringify(createRequire(import.meta.url).resolve('tsx/cjs/api'))}).register(); require(${JSON.stringify(fileURLToPath(file))})`
const bootstrap = extension === '.ts' ? tsxRequire(besideThis('pglite.worker')) : `import(${JSON.stringify(besideThis('pglite.worker').href)})`
// The initialiser runs for seconds: optimising PostgreSQL's hot code would not pay (4.1 s
// instead of 5.6 s to a fresh directory).
const initArgs = ['--liftoff-only', ...extension === '.ts' ? ['-e', tsxRequire(besideThis('pglite-init'))] : [fileURLToPath(besideThis('pglite-init'))]]
// The thread runs its own code only: none of the main thread's node options, so its preloads
// (--import, --require: an APM agent, a test runner's instrumentation) are not loaded again in
// it, each with its modules and a loader hook's own thread, at every start (under tap ~0.4 s
// of CPU). V8's flags (npm start's heap flags) are the process's and apply to it all the same.
const THREAD_EXEC_ARGV: string[] = []
/** Longest a fresh directory's initialisation may take (a few seconds on this machine). */
const INIT_TIMEOUT_MS = 300_000

// WebAssembly's types come with the DOM library, which this project does not load.
type WasmModule = NonNullable<PGliteOptions['pgliteWasmModule']>
declare const WebAssembly: { compile: (code: Uint8Array) => Promise<WasmModule> }

// A thread's start-up is mostly compiling PGlite's 9 MB of WebAssembly: done once per
// process, and each thread instantiates the compiled module (restarts, tests' many apps).
let artifacts: Promise<Pick<ThreadData, 'wasmModule' | 'fsBundle'>> | undefined
function pgliteArtifacts (): Promise<Pick<ThreadData, 'wasmModule' | 'fsBundle'>> {
  artifacts ??= (async () => {
    const dist = new URL('.', import.meta.resolve('@electric-sql/pglite'))
    const [code, bundle] = await Promise.all([readFile(new URL('pglite.wasm', dist)), readFile(new URL('pglite.data', dist))])
    return { wasmModule: await WebAssembly.compile(code), fsBundle: new Blob([bundle]) }
  })()
  artifacts.catch(() => { artifacts = undefined })
  return artifacts
}

/** Runs db/engine/pglite-init in a process of its own; its last line of stderr says why it failed. */
function initialise (dataDir: string, settings: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, initArgs, {
      env: { ...process.env, PGLITE_INIT: JSON.stringify({ dataDir, settings }) },
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: INIT_TIMEOUT_MS
    })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr = (stderr + chunk).slice(-4096) })
    child.once('error', reject)
    child.once('close', (code, signal) => {
      if (code === 0) return resolve()
      const why = stderr.trim().split('\n').at(-1) ?? ''
      reject(new DatabaseThreadError(`initialising the database failed (${signal ?? `exit code ${code}`})${why ? `: ${why}` : ''}`))
    })
  })
}

/**
 * A template's thousand small files into a fresh directory: cp(1) takes ~0.1 s where Node's
 * fs.cp takes ~0.9 s (it stats and copies each file in turn); fs.cp where there is no cp.
 */
function copyDirectory (from: string, to: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('cp', ['-R', `${from}/.`, to], (err) => {
      if (err === null) resolve()
      else if ((err as NodeJS.ErrnoException).code === 'ENOENT') cp(from, to, { recursive: true }).then(resolve, reject)
      else reject(new DatabaseThreadError(`copying the database template failed: ${err.message}`))
    })
  })
}

interface Pending { resolve: (reply: ThreadReply) => void, reject: (err: Error) => void, timer?: NodeJS.Timeout }

export class PGliteThread {
  readonly #worker: Worker
  readonly #lock: DataDirLock
  readonly #options: PGliteThreadOptions
  readonly #pending = new Map<number, Pending>()
  #nextId = 1
  #failure: Error | undefined
  #closing = false
  /** Ready once: a failure before that is start-up's error, not onFatal's. */
  #started = false

  private constructor (worker: Worker, lock: DataDirLock, options: PGliteThreadOptions) {
    this.#worker = worker
    this.#lock = lock
    this.#options = options
    worker.on('message', (message: ThreadReply | ThreadNotice) => {
      if ('notice' in message) options.onNotification?.(message.notice.channel, message.notice.payload)
      else this.#answer(message)
    })
    worker.on('error', (err) => this.#fail(new DatabaseThreadError(`the database thread failed: ${err.message}`, { cause: err })))
    worker.on('exit', (code) => {
      if (!this.#closing || this.#pending.size > 0) this.#fail(new DatabaseThreadError(`the database thread ended (exit code ${code})`))
    })
  }

  /**
   * Takes the directory for this process (DataDirInUseError if another one holds it), starts the
   * thread and waits until the database is open (initialising a fresh directory first).
   */
  static async start (options: PGliteThreadOptions): Promise<PGliteThread> {
    const settings = options.settings ?? []
    // The code compiles here while a fresh directory is initialised beside.
    const artifactsReady = pgliteArtifacts()
    let thread: PGliteThread | undefined
    let lost: Error | undefined
    const lock = await lockDataDir(options.dataDir, {
      onLost: (err) => {
        lost = new DatabaseThreadError(err.message)
        if (thread !== undefined) thread.#fail(lost)
      }
    }).catch((err: Error) => {
      if (err instanceof DataDirInUseError) throw err
      throw new DatabaseThreadError(`cannot take the database directory ${options.dataDir}: ${err.message}`, { cause: err })
    })
    try {
      if (!existsSync(join(options.dataDir, 'PG_VERSION'))) {
        const template = options.template === false ? undefined : usableTemplate(options.template)
        if (template !== undefined) await copyDirectory(template, options.dataDir)
        else await initialise(options.dataDir, settings)
      }
      const data: ThreadData = { dataDir: options.dataDir, settings, ...await artifactsReady }
      const worker = new Worker(bootstrap, { eval: true, workerData: data, execArgv: THREAD_EXEC_ARGV })
      thread = new PGliteThread(worker, lock, options)
      // The thread says it is ready with an answer to id 0, which no request uses.
      await new Promise((resolve, reject) => thread!.#pending.set(0, { resolve, reject }))
      if (lost !== undefined) throw lost
      thread.#started = true
      return thread
    } catch (err) {
      await thread?.close()
      await lock.release()
      throw err
    }
  }

  async query (sql: string, params: readonly unknown[]): Promise<{ rows: unknown[], affectedRows?: number }> {
    const reply = await this.#request({ sql, params }, true)
    if (reply.error !== undefined) {
      const { message, ...fields } = reply.error
      throw Object.assign(new Error(message), fields)
    }
    return reply
  }

  /** Lets queries already sent finish, closes the data directory cleanly and ends the thread. Never throws. */
  async close (): Promise<void> {
    if (this.#closing) return
    if (this.#failure !== undefined) {
      this.#closing = true
      await this.#worker.terminate()
    } else {
      const ended = new Promise((resolve) => this.#worker.once('exit', resolve))
      // Bounded like a query; a thread that dies or hangs while closing is ended all the same.
      const closed = this.#request({}, true)
      this.#closing = true
      await closed.catch(() => {})
      await ended
    }
    // Only once the thread is gone may another process open the directory.
    await this.#lock.release()
  }

  #request (request: Omit<ThreadRequest, 'id'>, timed: boolean): Promise<ThreadReply> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure)
    if (this.#closing) return Promise.reject(new DatabaseThreadError('the database is closed'))
    const id = this.#nextId++
    return new Promise<ThreadReply>((resolve, reject) => {
      const pending: Pending = { resolve, reject }
      if (timed) {
        pending.timer = setTimeout(() => {
          this.#fail(new DatabaseThreadError(`the database thread did not answer within ${this.#options.queryTimeoutMs} ms`))
        }, this.#options.queryTimeoutMs)
      }
      this.#pending.set(id, pending)
      this.#worker.postMessage({ ...request, id } satisfies ThreadRequest)
    })
  }

  #answer (reply: ThreadReply): void {
    const pending = this.#pending.get(reply.id)
    if (pending === undefined) return
    this.#pending.delete(reply.id)
    clearTimeout(pending.timer)
    pending.resolve(reply)
  }

  #fail (err: Error): void {
    if (this.#failure !== undefined) return
    this.#failure = err
    for (const pending of this.#pending.values()) {
      clearTimeout(pending.timer)
      pending.reject(err)
    }
    this.#pending.clear()
    // A hung thread is stopped; a dead one is gone already.
    this.#worker.terminate().catch(() => {})
    if (this.#started && !this.#closing) this.#options.onFatal?.(err)
  }
}

/** Kysely over a PGliteThread, started when Kysely first needs it. */
export class PGliteThreadDialect implements Dialect {
  readonly #options: PGliteThreadOptions

  constructor (options: PGliteThreadOptions) {
    this.#options = options
  }

  createAdapter () { return new PGliteAdapter() }
  createQueryCompiler () { return new PostgresQueryCompiler() }
  createIntrospector (db: Kysely<unknown>) { return new PostgresIntrospector(db) }
  createDriver (): Driver { return new PGliteThreadDriver(this.#options) }
}

class PGliteThreadDriver implements Driver {
  readonly #options: PGliteThreadOptions
  #connection: PGliteThreadConnection | undefined
  #thread: PGliteThread | undefined

  constructor (options: PGliteThreadOptions) {
    this.#options = options
  }

  async init (): Promise<void> {
    this.#thread = await PGliteThread.start(this.#options)
    this.#connection = new PGliteThreadConnection(this.#thread)
  }

  async acquireConnection (): Promise<DatabaseConnection> {
    if (this.#connection === undefined) throw new DatabaseThreadError('the database is not open')
    return this.#connection
  }

  async releaseConnection (): Promise<void> {}

  async beginTransaction (connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const modes = [
      settings.isolationLevel && `isolation level ${settings.isolationLevel}`,
      settings.accessMode
    ].filter(Boolean)
    await connection.executeQuery(CompiledQuery.raw(modes.length > 0 ? `start transaction ${modes.join(', ')}` : 'begin'))
  }

  async commitTransaction (connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('commit'))
  }

  async rollbackTransaction (connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('rollback'))
  }

  async destroy (): Promise<void> {
    await this.#thread?.close()
  }
}

class PGliteThreadConnection implements DatabaseConnection {
  readonly #thread: PGliteThread

  constructor (thread: PGliteThread) {
    this.#thread = thread
  }

  async executeQuery<R> (query: CompiledQuery): Promise<QueryResult<R>> {
    const { rows, affectedRows } = await this.#thread.query(query.sql, query.parameters)
    return {
      rows: rows as R[],
      numAffectedRows: affectedRows === undefined ? undefined : BigInt(affectedRows)
    }
  }

  async * streamQuery (): AsyncIterableIterator<QueryResult<never>> {
    throw new Error('Streaming is not supported by the embedded database.')
  }
}
