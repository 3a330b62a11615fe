import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))
/** The migrated embedded database that test files copy (built by test/setup.ts). */
export const TEMPLATE_DATA_DIR = join(ROOT, '.tap', 'pglite-template')
