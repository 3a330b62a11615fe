import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))

/**
 * The migrated embedded database that test files copy (built by test/setup.ts). Named
 * by a hash of the migrations, so it is immutable once built: concurrent test runs
 * share it, and a changed migration gets a new one.
 */
export function templateDataDir (): string {
  const folder = join(ROOT, 'db', 'migrations')
  const hash = createHash('sha256')
  for (const file of readdirSync(folder).sort()) hash.update(file).update(readFileSync(join(folder, file)))
  return join(ROOT, '.tap', `pglite-template-${hash.digest('hex').slice(0, 16)}`)
}
