// The dialect choice: a pg pool when DATABASE_URL is set, otherwise embedded PGlite
// persisted under DATA_DIR, so the service runs with zero configuration. The same
// migrations and queries run on both.
import { mkdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import {
  Kysely, PGliteDialect, PostgresDialect,
  type DatabaseConnection, type Driver, type TransactionSettings
} from 'kysely'
import pg from 'pg'
import type { Database } from './types.js'

export interface DatabaseOptions {
  /** postgres:// URL; unset means the embedded database. */
  url?: string
  /** Where the embedded database keeps its files. */
  dataDir: string
  poolMax?: number
  /** Called with errors of idle pool clients (a restarted server, a killed backend), which would otherwise crash the process. */
  onPoolError?: (err: Error) => void
}

export interface DatabaseHandle {
  db: Kysely<Database>
  kind: 'postgres' | 'pglite'
  close: () => Promise<void>
}

export function createDatabase (options: DatabaseOptions): DatabaseHandle {
  if (options.url) {
    const pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolMax ?? 10,
      // Fail fast instead of queueing forever when the server is gone or the pool is exhausted.
      connectionTimeoutMillis: 5_000,
      idleTimeoutMillis: 30_000,
      statement_timeout: 15_000,
      application_name: 'task-subscription-backend'
    })
    pool.on('error', (err) => options.onPoolError?.(err))
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
    return { db, kind: 'postgres', close: () => db.destroy() }
  }

  const dir = resolve(options.dataDir, 'pglite')
  mkdirSync(dir, { recursive: true })
  const db = new Kysely<Database>({
    dialect: new SerializedPGliteDialect({
      pglite: async () => {
        const { PGlite } = await import('@electric-sql/pglite')
        return PGlite.create(dir)
      }
    })
  })
  return { db, kind: 'pglite', close: () => db.destroy() }
}

export const pgliteDataDir = (dataDir: string): string => join(resolve(dataDir), 'pglite')

/**
 * PGlite has one connection, and Kysely's PGlite driver routes every query issued while
 * a transaction is open into that transaction, whoever issued it. Under concurrent
 * requests that mixes unrelated work into (and rolls it back with) another request's
 * transaction. This driver hands the connection to one user at a time.
 */
class SerializedPGliteDialect extends PGliteDialect {
  override createDriver (): Driver {
    return new SerializedDriver(super.createDriver())
  }
}

class SerializedDriver implements Driver {
  #inner: Driver
  #queue: Promise<void> = Promise.resolve()
  #release: (() => void) | undefined

  constructor (inner: Driver) {
    this.#inner = inner
  }

  init () { return this.#inner.init() }
  destroy () { return this.#inner.destroy() }

  async acquireConnection (): Promise<DatabaseConnection> {
    const previous = this.#queue
    let release!: () => void
    this.#queue = new Promise<void>((resolve) => { release = resolve })
    await previous
    this.#release = release
    return this.#inner.acquireConnection()
  }

  async releaseConnection (connection: DatabaseConnection): Promise<void> {
    await this.#inner.releaseConnection(connection)
    const release = this.#release
    this.#release = undefined
    release?.()
  }

  beginTransaction (connection: DatabaseConnection, settings: TransactionSettings) {
    return this.#inner.beginTransaction(connection, settings)
  }

  commitTransaction (connection: DatabaseConnection) { return this.#inner.commitTransaction(connection) }
  rollbackTransaction (connection: DatabaseConnection) { return this.#inner.rollbackTransaction(connection) }
}
