// The dialect choice: a pg pool when DATABASE_URL is set, otherwise embedded PGlite
// persisted under DATA_DIR, so the service runs with zero configuration. The same
// migrations and queries run on both.
import { mkdirSync } from 'node:fs'
import { resolve } from 'node:path'
import { Kysely, PGliteDialect, PostgresDialect } from 'kysely'
import pg from 'pg'
import type { Database } from './types.js'

export interface DatabaseOptions {
  /** postgres:// URL; unset means the embedded database. */
  url?: string
  /** Where the embedded database keeps its files. */
  dataDir: string
  poolMax?: number
  /** How long a request waits for a pooled connection (or a new one) before failing with 503. */
  connectTimeoutMs?: number
  statementTimeoutMs?: number
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
    const onError = (err: Error) => options.onPoolError?.(err)
    // pg emits 'error' on a client whose connection dies while no query is running;
    // the pool listens only while the client is idle. One dropped connection at the
    // wrong moment would otherwise crash the process (found by test/faults.test.ts).
    class GuardedClient extends pg.Client {
      constructor (config?: string | pg.ClientConfig) {
        super(config)
        this.on('error', onError)
      }
    }
    const pool = new pg.Pool({
      Client: GuardedClient,
      connectionString: options.url,
      max: options.poolMax ?? 10,
      // Fail fast instead of queueing forever when the server is gone or the pool is exhausted.
      connectionTimeoutMillis: options.connectTimeoutMs ?? 3_000,
      idleTimeoutMillis: 30_000,
      statement_timeout: options.statementTimeoutMs ?? 15_000,
      application_name: 'task-subscription-backend'
    })
    pool.on('error', onError)
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
    return { db, kind: 'postgres', close: () => db.destroy() }
  }

  const dir = resolve(options.dataDir, 'pglite')
  mkdirSync(dir, { recursive: true })
  const db = new Kysely<Database>({
    // One connection: Kysely serializes its use (the adapter declares no multiple
    // connections), so concurrent requests never share a transaction; test/db.test.ts checks it.
    dialect: new PGliteDialect({
      pglite: async () => {
        const { PGlite } = await import('@electric-sql/pglite')
        return PGlite.create(dir)
      }
    })
  })
  return { db, kind: 'pglite', close: () => db.destroy() }
}

// Errors that mean the database cannot be reached right now (as opposed to a bad query).
const DB_UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', '57P01', '57P02', '57P03', '57014', '53300', '08000', '08001', '08003', '08004', '08006'])
export function isDatabaseUnavailable (err: { code?: unknown, message?: string }): boolean {
  if (typeof err.code === 'string' && DB_UNAVAILABLE_CODES.has(err.code)) return true
  const message = err.message ?? ''
  return message.includes('timeout exceeded when trying to connect') ||
    message.includes('Connection terminated') ||
    message.includes('PGlite is closed')
}
