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
