// The database: Kysely over a pg pool (DATABASE_URL) or embedded PGlite, migrated to
// the latest version before the server accepts requests, closed with the server.
import fp from 'fastify-plugin'
import type { Kysely } from 'kysely'
import { createDatabase } from '../../db/connect.js'
import { migrateToLatest } from '../../db/migrate.js'
import type { Database } from '../../db/types.js'

declare module 'fastify' {
  interface FastifyInstance {
    db: Kysely<Database>
    dbKind: 'postgres' | 'pglite'
  }
}

export default fp(async function db (fastify) {
  const { config, log } = fastify
  const handle = createDatabase({
    url: config.DATABASE_URL,
    dataDir: config.DATA_DIR,
    poolMax: config.DATABASE_POOL_MAX,
    onPoolError: (err) => log.warn({ err: { message: err.message, code: (err as { code?: string }).code } }, 'idle database client failed')
  })
  fastify.decorate('db', handle.db)
  fastify.decorate('dbKind', handle.kind)
  fastify.addHook('onClose', () => handle.close())

  const { results } = await migrateToLatest(handle.db)
  for (const migration of results ?? []) {
    log.info({ migration: migration.migrationName, status: migration.status }, 'migration applied')
  }
}, { name: 'db' })
