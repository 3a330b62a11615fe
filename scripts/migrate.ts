// `npm run migrate`: brings the configured database (DATABASE_URL, or the embedded one
// under DATA_DIR) to the latest schema. The server also does this at start-up. On the
// embedded database it refuses while a server has the directory (db/engine/data-dir-lock.ts).
// In the image, without tsx: `node dist/scripts/migrate.js`.
import { createDatabase } from '../db/engine/connect.js'
import { migrateToLatest } from '../db/engine/migrate.js'
import { ConfigError, loadConfig } from '../config.js'
import { DataDirInUseError } from '../db/engine/data-dir-lock.js'
import { loadEnvFile } from '../env-file.js'

try {
  loadEnvFile()
  const config = loadConfig()
  const handle = createDatabase({ url: config.db.url, dataDir: config.db.dataDir, pooler: config.db.pooler, statementTimeoutMs: config.db.statementTimeoutMs })
  try {
    const { results } = await migrateToLatest(handle.db)
    if (!results?.length) console.log(`${handle.kind}: already at the latest version`)
    for (const r of results ?? []) console.log(`${handle.kind}: ${r.migrationName} ${r.status}`)
  } finally {
    await handle.close()
  }
} catch (err) {
  console.error(err instanceof ConfigError || err instanceof DataDirInUseError ? err.message : `migration failed: ${(err as Error).message}`)
  process.exitCode = 1
}
