import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { migrationsDigest } from '../../db/engine/embedded-template.js'

/** Where the code runs from: .tap/build/<pid>/, where scripts/test.ts compiles it for every test command. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** The project itself: package.json, package-lock.json, .tap/. */
export const PROJECT_ROOT = (function projectRoot (dir: string): string {
  if (existsSync(join(dir, 'package.json')) || dirname(dir) === dir) return dir
  return projectRoot(dirname(dir))
})(ROOT)

/**
 * The migrated embedded database that test files copy (built by test/support/setup.ts). Named
 * by a hash of the migrations, so it is immutable once built: concurrent test runs
 * share it, and a changed migration gets a new one.
 */
export function templateDataDir (): string {
  return join(PROJECT_ROOT, '.tap', `pglite-template-${migrationsDigest()}`)
}
