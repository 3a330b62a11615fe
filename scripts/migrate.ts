// `npm run migrate`: brings the configured database (DATABASE_URL, or the embedded one
// under DATA_DIR) to the latest schema. The server also does this at start-up.
import { createDatabase } from '../db/connect.js'
import { migrateToLatest } from '../db/migrate.js'
import { ConfigError, loadConfig } from '../config.js'

try {
  const config = loadConfig()
  const handle = createDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR })
  try {
    const { results } = await migrateToLatest(handle.db)
    if (!results?.length) console.log(`${handle.kind}: already at the latest version`)
    for (const r of results ?? []) console.log(`${handle.kind}: ${r.migrationName} ${r.status}`)
  } finally {
    await handle.close()
  }
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : `migration failed: ${(err as Error).message}`)
  process.exitCode = 1
}
