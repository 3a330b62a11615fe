// The database: Kysely over a pg pool (DATABASE_URL) or embedded PGlite, checked (a pooler in
// between that drops the statement timeout or loses named statements stops start-up:
// db/engine/pooler-check.ts), migrated to the latest version, closed with the server. A PostgreSQL
// server that cannot be reached at start-up does not stop the service: it starts, answers 503
// (and /ready fails) and keeps retrying the check and the migration in the background until
// the database is back.
import fp from 'fastify-plugin'
import type { Kysely } from 'kysely'
import { createDatabase, isDatabaseUnavailable, type DatabaseHandle, type PoolStats } from '../../db/engine/connect.js'
import { migrateToLatest, schemaIsCurrent } from '../../db/engine/migrate.js'
import { DatabaseSetupError } from '../../db/engine/pooler-check.js'
import type { Database } from '../../db/types.js'
import { ServiceUnavailableError } from '../../errors.js'
import type { Metrics } from './metrics.js'

declare module 'fastify' {
  interface FastifyInstance {
    db: Kysely<Database>
    /** Which engine `db` runs on: a PostgreSQL server, or the embedded one in this process (the tasks page picks its statement by it). */
    dbEngine: 'postgres' | 'pglite'
    /** The embedded database's notifications (LISTEN); undefined on a PostgreSQL server (db/engine/connect.ts). */
    listenToDb: DatabaseHandle<Database>['listen']
  }
  interface FastifyContextConfig {
    /** false: answers without the database, also before the schema is in place (liveness, the API document). */
    needsDatabase?: boolean
  }
}

const RETRY_MS = 2_000

export default fp(async function db (fastify) {
  const { config, log } = fastify
  const handle = createDatabase<Database>({
    url: config.db.url,
    dataDir: config.db.dataDir,
    poolMax: config.db.poolMax,
    connectTimeoutMs: config.db.connectTimeoutMs,
    statementTimeoutMs: config.db.statementTimeoutMs,
    queryTimeoutMs: config.db.queryTimeoutMs,
    preparedStatements: config.db.preparedStatements,
    pooler: config.db.pooler,
    onPoolError: (err) => log.warn({ err }, 'idle database client failed'),
    tracerProvider: fastify.tracerProvider,
    // The embedded database's thread is gone: nothing can be served again. Every query
    // answers 503 (so /ready fails), requests in flight finish, and the server closes and
    // exits non-zero, for its supervisor to restart it.
    onFatal: (err) => {
      log.fatal({ err }, 'the embedded database failed: closing')
      process.exitCode = 1
      fastify.close().catch((closeErr: unknown) => log.error({ err: closeErr }, 'closing after the database failed'))
    }
  })
  fastify.decorate('db', handle.db)
  fastify.decorate('dbEngine', handle.kind)
  fastify.decorate('listenToDb', handle.listen)
  registerPoolMetrics(fastify.metrics, handle.poolStats)

  let migrated = false
  let retry: NodeJS.Timeout | undefined
  const migrate = async () => {
    // Both at once: neither changes anything, and a start of an up-to-date instance needs no more.
    const [current] = await Promise.all([schemaIsCurrent(handle.db), handle.checkSessions()])
    if (!current) {
      const { results } = await migrateToLatest(handle.db)
      for (const migration of results ?? []) {
        log.info({ migration: migration.migrationName, status: migration.status }, 'migration applied')
      }
    }
    migrated = true
  }
  const retryLater = () => {
    retry = setTimeout(() => {
      migrate().then(() => log.info('database reachable again: schema ready'), (err) => {
        if (err instanceof DatabaseSetupError) {
          // As at start-up, the service cannot run this way: stop, for the operator to see why.
          log.fatal(err.message)
          process.exitCode = 1
          fastify.close().catch((closeErr: unknown) => log.error({ err: closeErr }, 'closing after the database check failed'))
          return
        }
        if (!isDatabaseUnavailable(err)) log.error({ err }, 'migration failed')
        retryLater()
      })
    }, RETRY_MS)
  }
  fastify.addHook('onClose', async () => {
    clearTimeout(retry)
    await handle.close()
  })

  // The schema check (and the embedded database's start, in its own thread) runs while the
  // other plugins and the routes load, and is waited for before the server is ready: it was
  // ~0.1 s of round trips in the middle of start-up (issue 34). Settled into a value at once,
  // so a failure is never an unhandled rejection while it waits; the scheduler's jobs start
  // after it (their onReady comes after this one: the scheduler depends on this plugin).
  const checked = migrate().then(() => undefined, (err: unknown) => err as Error)
  fastify.addHook('onReady', async () => {
    const err = await checked
    if (err === undefined) return
    // The embedded database has nothing to wait for: a thread that cannot start stops start-up.
    if (handle.kind === 'pglite' || !isDatabaseUnavailable(err)) throw err
    log.error({ err }, 'database unreachable at start-up: serving 503 and retrying')
    retryLater()
  })

  fastify.addHook('onRequest', (request, _reply, done) => {
    if (migrated || request.routeOptions.config.needsDatabase === false) return done()
    done(new ServiceUnavailableError())
  })
}, { name: 'db', dependencies: ['metrics', 'tracing'] })

/** The connection figures, read when scraped. */
function registerPoolMetrics (metrics: Metrics, stats: () => PoolStats): void {
  const gauge = (name: string, help: string, read: (s: PoolStats) => number | undefined) =>
    metrics.gauge({ name, help, read: () => read(stats()) })
  gauge('db_pool_connections_in_use', 'Database connections running a query or holding a transaction (PGlite: its one connection, 0 or 1)', (s) => s.inUse)
  gauge('db_pool_connections_idle', 'Open database connections not in use', (s) => s.idle)
  gauge('db_pool_connections_max', 'The most connections the pool opens (DATABASE_POOL_MAX; PGlite: 1)', (s) => s.max)
  // PGlite cannot tell: no series rather than a misleading 0.
  if (stats().waiting !== undefined) gauge('db_pool_requests_waiting', 'Queries waiting for a free connection (PostgreSQL only)', (s) => s.waiting)
}
