// The embedded database's template: a data directory initialised and migrated once, when the
// service is built (`npm run build`, and `npm start`'s build when the migrations or PGlite
// changed), that a fresh DATA_DIR copies instead of running initdb and every migration at its
// first start: ~10 s on a 2-core VM, most of the time to a first answer (issue 34).
//
// A template is used only when its stamp (PGlite's version and every migration file's name and
// bytes) matches the running code: a template left behind by an older build is ignored, and the
// start then initialises and migrates as it would without one.
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { MIGRATION_FOLDER } from './migrate.js'

/** Where a build keeps its template: dist/embedded-template (beside db/, as the migrations are). */
export const TEMPLATE_DIR = fileURLToPath(new URL('../../embedded-template', import.meta.url))

const STAMP_FILE = 'STAMP'

/** A hash of every migration file's name and bytes (the tests name their template by it too). */
export function migrationsDigest (): string {
  const hash = createHash('sha256')
  for (const file of readdirSync(MIGRATION_FOLDER).sort()) hash.update(file).update('\0').update(readFileSync(join(MIGRATION_FOLDER, file)))
  return hash.digest('hex').slice(0, 16)
}

/** PGlite's version and a hash of the migrations: what a template was made by. */
function templateStamp (): string {
  // Its package.json is not among its exports: found beside its entry point (dist/index.js).
  const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.resolve('@electric-sql/pglite')), 'utf8')) as { version: string }
  return `pglite ${version} migrations ${migrationsDigest()}`
}

const stampOf = (dir: string): string | undefined =>
  existsSync(join(dir, STAMP_FILE)) ? readFileSync(join(dir, STAMP_FILE), 'utf8') : undefined

/**
 * The template's PGlite directory when one made by this code exists, for a fresh directory to
 * copy (asked only when a directory is fresh: the stamp reads every migration file).
 */
export function usableTemplate (dir = TEMPLATE_DIR): string | undefined {
  try {
    return isCurrentTemplate(dir) ? join(dir, 'pglite') : undefined
  } catch {
    return undefined
  }
}

/** Marks a directory as a template of this code (db/engine/make-template.ts, once it is whole). */
export const writeStamp = (dir: string): Promise<void> => writeFile(join(dir, STAMP_FILE), templateStamp())

/** Whether `dir` holds a template of this code already. */
export const isCurrentTemplate = (dir: string): boolean => stampOf(dir) === templateStamp()
