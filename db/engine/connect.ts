// The dialect choice: a pg pool when DATABASE_URL is set, otherwise embedded PGlite
// persisted under DATA_DIR, in a thread of its own (db/engine/pglite-thread.ts), so the service
// runs with zero configuration. The same migrations and queries run on both, and both read timestamptz as ISO-8601 strings
// (db/engine/timestamps.ts). The engine knows no table: the schema's types are db/types.ts.
import { mkdirSync } from 'node:fs'
import { resolve } from 'node:path'
import type { TracerProvider } from '@opentelemetry/api'
import { Kysely, PostgresDialect, sql } from 'kysely'
import type Pg from 'pg'
import pg from './pg.js'
import { MigrationLockAdapter } from './migrate.js'
import { checkDatabaseSessions, type DatabasePooler } from './pooler-check.js'
import { withQuerySpans } from './query-spans.js'
import { statementName } from './statement-name.js'
import { PGliteThreadDialect } from './pglite-thread.js'
import { pgTypes, SESSION_SETTINGS } from './timestamps.js'

export interface DatabaseOptions {
  /** postgres:// URL; unset means the embedded database. */
  url?: string
  /** Where the embedded database keeps its files. */
  dataDir: string
  poolMax?: number
  /** How long a request waits for a pooled connection (or a new one) before failing with 503. */
  connectTimeoutMs?: number
  statementTimeoutMs?: number
  /**
   * How long the client waits for a query's answer before failing it (503) and discarding
   * its connection: the bound when the network goes silent and nothing else would end the
   * wait. Keep it above statementTimeoutMs, so slow statements are cancelled by the server.
   * The embedded database cannot cancel a statement: past this bound its thread is stopped
   * and onFatal called.
   */
  queryTimeoutMs?: number
  /**
   * Run the prepared hot queries (db/engine/prepared.ts) as named statements, parsed and planned
   * once per connection (default true). Off for poolers that cannot keep them, such as
   * PgBouncer before 1.21 in transaction mode.
   */
  preparedStatements?: boolean
  /**
   * What stands between the service and PostgreSQL (default `none`). `transaction`: a pooler in
   * transaction mode, which refuses or drops the statement_timeout start-up parameter: it is not
   * sent, and checkSessions() checks that the server sessions have one of their own.
   */
  pooler?: DatabasePooler
  /**
   * The embedded database's thread died or stopped answering (db/engine/pglite-thread.ts): every
   * query fails from then on, and the server should stop.
   */
  onFatal?: (err: Error) => void
  /** Called with errors of idle pool clients (a restarted server, a killed backend), which would otherwise crash the process. */
  onPoolError?: (err: Error) => void
  /** With tracing on (plugins/tracing.ts): a span per statement (db/engine/query-spans.ts). */
  tracerProvider?: TracerProvider
  /**
   * The template a fresh embedded directory copies when it is one of this code
   * (db/engine/embedded-template.ts): this build's by default, another directory's, or false
   * to initialise it from nothing.
   */
  template?: string | false
}

/** Connections at this moment, for the metrics (plugins/app/db.ts). */
export interface PoolStats {
  /** Connections running a query or holding a transaction. */
  inUse: number
  idle: number
  /** Queries waiting for a connection; undefined where the driver cannot tell (PGlite). */
  waiting: number | undefined
  max: number
}

export interface DatabaseHandle<DB> {
  db: Kysely<DB>
  kind: 'postgres' | 'pglite'
  poolStats: () => PoolStats
  /**
   * Start-up checks of the way to PostgreSQL (db/engine/pooler-check.ts): throws DatabaseSetupError
   * when a pooler in between drops the statement timeout or loses named statements. Nothing
   * to check on the embedded database.
   */
  checkSessions: () => Promise<void>
  /**
   * The embedded database only (its one session; a pool has none to listen on): LISTEN on
   * `channel`, and hear each notification on it once the change that sent it has committed,
   * before the answer to the query that committed it. Resolves once the session listens.
   */
  listen?: (channel: string, listener: (payload: string) => void) => Promise<void>
  close: () => Promise<void>
}

/** The one place that picks PostgreSQL or the embedded engine; DB is the schema's type (db/types.ts). */
export function createDatabase<DB> (options: DatabaseOptions): DatabaseHandle<DB> {
  if (options.url) {
    const onError = (err: Error) => options.onPoolError?.(err)
    const prepared = options.preparedStatements ?? true
    // pg emits 'error' on a client whose connection dies while no query is running;
    // the pool listens only while the client is idle. One dropped connection at the
    // wrong moment would otherwise crash the process (found by test/integration/faults.test.ts).
    class ServiceClient extends pg.Client {
      constructor (config?: string | Pg.ClientConfig) {
        super(config)
        this.on('error', onError)
      }

      // A query that timed out is still on the wire: pg keeps its connection waiting for
      // the answer, and the pool would hand it out again with every later query stuck behind
      // the lost one. Ending the client closes the socket, and the pool, finding it ended
      // when Kysely releases it (this runs first), discards it and opens a new one.
      readonly #endIfTimedOut = (err: Error) => {
        if (err.message === QUERY_TIMEOUT_MESSAGE) this.end().catch(onError)
      }

      // Kysely calls query(text, values); a prepared hot query's text goes out as its
      // named statement instead. Every other form of call passes through untouched.
      override query (...args: unknown[]): never {
        const [text, values] = args
        const name = prepared && args.length === 2 && typeof text === 'string' && Array.isArray(values) ? statementName(text) : undefined
        const call = super.query as (...params: unknown[]) => never
        const result = name === undefined ? call.apply(this, args) : call.call(this, { name, text, values })
        if ((result as unknown) instanceof Promise) (result as Promise<unknown>).catch(this.#endIfTimedOut)
        return result
      }
    }
    const max = options.poolMax ?? 10
    const pooler = options.pooler ?? 'none'
    const statementTimeoutMs = options.statementTimeoutMs ?? 15_000
    const connection: Pg.ClientConfig = {
      connectionString: options.url,
      // Fail fast instead of queueing forever when the server is gone or the pool is exhausted.
      connectionTimeoutMillis: options.connectTimeoutMs ?? 3_000,
      // A start-up parameter, which a pooler in transaction mode refuses or drops: there the
      // server sessions carry it themselves (checkSessions).
      ...(pooler === 'none' && { statement_timeout: statementTimeoutMs }),
      query_timeout: options.queryTimeoutMs ?? statementTimeoutMs + 1000,
      // Idle pooled connections to a vanished server are noticed (probes after 10 s of
      // silence) and dropped, instead of failing the next request that takes them.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      application_name: 'task-subscription-backend',
      types: pgTypes
    }
    const pool = new pg.Pool({ ...connection, Client: ServiceClient, max, idleTimeoutMillis: 30_000 })
    pool.on('error', onError)
    // Queued on the new client before anything else runs on it. (Not a startup option: a
    // DATABASE_URL's own ?options= or PGOPTIONS would replace it.) Behind PgBouncer in
    // transaction mode they hold too: it keeps each client's TimeZone and DateStyle and sets
    // them on whichever server session runs its next transaction.
    pool.on('connect', (client) => { client.query(SESSION_SETTINGS).catch(onError) })
    const db = new Kysely<DB>({ dialect: withQuerySpans(new ServiceDialect({ pool }), options.tracerProvider) })
    const poolStats = (): PoolStats => ({
      inUse: pool.totalCount - pool.idleCount, idle: pool.idleCount, waiting: pool.waitingCount, max
    })
    const checkSessions = () => checkDatabaseSessions(connection, { pooler, statementTimeoutMs, preparedStatements: prepared })
    return { db, kind: 'postgres', poolStats, checkSessions, close: () => db.destroy() }
  }

  const dir = resolve(options.dataDir, 'pglite')
  mkdirSync(dir, { recursive: true })
  // Whether the one connection is taken: counted around the driver's acquire and release,
  // which Kysely calls inside its own lock. Queries waiting on that lock are not visible.
  let inUse = 0
  const listeners = new Map<string, Array<(payload: string) => void>>()
  class CountedDialect extends PGliteThreadDialect {
    override createDriver () {
      const driver = super.createDriver()
      const acquire = driver.acquireConnection.bind(driver)
      const release = driver.releaseConnection.bind(driver)
      driver.acquireConnection = async () => {
        const connection = await acquire()
        inUse++
        return connection
      }
      driver.releaseConnection = async (connection) => {
        inUse--
        await release(connection)
      }
      return driver
    }
  }
  const db = new Kysely<DB>({
    dialect: withQuerySpans(new CountedDialect({
      dataDir: dir,
      settings: PGLITE_SETTINGS,
      template: options.template,
      queryTimeoutMs: options.queryTimeoutMs ?? (options.statementTimeoutMs ?? 15_000) + 1000,
      onFatal: options.onFatal,
      onNotification: (channel, payload) => {
        for (const listener of listeners.get(channel) ?? []) listener(payload)
      }
    }), options.tracerProvider)
  })
  const poolStats = (): PoolStats => ({ inUse, idle: 1 - inUse, waiting: undefined, max: 1 })
  const listen = async (channel: string, listener: (payload: string) => void): Promise<void> => {
    listeners.set(channel, [...listeners.get(channel) ?? [], listener])
    await sql`listen ${sql.id(channel)}`.execute(db)
  }
  return { db, kind: 'pglite', poolStats, checkSessions: async () => {}, listen, close: () => db.destroy() }
}

/** PostgreSQL with the migration lock that holds through a pooler (db/engine/migrate.ts says why). */
class ServiceDialect extends PostgresDialect {
  override createAdapter () { return new MigrationLockAdapter() }
}

// PostgreSQL settings of the embedded database. shared_buffers: PostgreSQL touches all of
// it at start-up, so it is resident memory from the first second (a process holding only
// the thread: 425 MB with PGlite's 128 MB default, ~280 MB with 16 MB). A single instance's
// working set fits, and pages beyond it come from the operating system's cache.
const PGLITE_SETTINGS = ['shared_buffers=16MB']

// pg's error when queryTimeoutMs passes without an answer.
const QUERY_TIMEOUT_MESSAGE = 'Query read timeout'
// pg's error when connectionTimeoutMillis passes before a client's connection is up.
const CONNECT_TIMEOUT_MESSAGE = 'timeout expired'

// Errors that mean the database cannot be reached right now (as opposed to a bad query).
const DB_UNAVAILABLE_CODES = new Set(['PGLITE_THREAD_FAILED', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', '57P01', '57P02', '57P03', '57014', '53300', '08000', '08001', '08003', '08004', '08006'])
export function isDatabaseUnavailable (err: { code?: unknown, message?: string }): boolean {
  if (typeof err.code === 'string' && DB_UNAVAILABLE_CODES.has(err.code)) return true
  const message = err.message ?? ''
  return message.includes('timeout exceeded when trying to connect') ||
    message === QUERY_TIMEOUT_MESSAGE ||
    // pg's own connect timeout, on a client opened outside the pool (the start-up session
    // check, db/engine/pooler-check.ts): a server slow to answer is unavailable, not broken.
    message === CONNECT_TIMEOUT_MESSAGE ||
    // A query on a client already ended (a transaction's rollback after its query timed out).
    message.endsWith('is not queryable') ||
    // Kysely's, once shutdown has closed the database under requests still queued for it.
    message === 'driver has already been destroyed' ||
    message.includes('Connection terminated') ||
    message.includes('PGlite is closed')
}
