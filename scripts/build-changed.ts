// `npm start`'s build: brings dist/ up to date with the sources of tsconfig.build.json by
// stripping the types of the files changed since their output was written (esbuild, file by
// file, as `npm test` does), and deleting the output of sources that are gone (autoload
// would still load a deleted route, and Kysely a deleted migration). Under a second, where a
// full `tsc` build took about 30 s on every start. Types are checked by `npm run typecheck`
// (and CI), as under `npm run dev`; `npm run build` is still the clean tsc build the image uses.
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { stripTypes } from './strip-types.js'
import { bundleVendored, useVendored, vendorDir } from './vendor.js'

const root = fileURLToPath(new URL('..', import.meta.url))
const outdir = join(root, 'dist')
const started = performance.now()

const { include, exclude = [] } = JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { include: string[], exclude?: string[] }
const excluded = new Set(exclude.map((entry) => join(root, entry)))
const sources = include.flatMap((entry) => typeScriptFiles(join(root, entry)))

function typeScriptFiles (path: string): string[] {
  if (excluded.has(path) || !existsSync(path)) return []
  if (!statSync(path).isDirectory()) return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : []
  return readdirSync(path).flatMap((name) => typeScriptFiles(join(path, name)))
}

const outputOf = (source: string) => join(outdir, relative(root, source).replace(/\.ts$/, '.js'))
const mtime = (path: string) => existsSync(path) ? statSync(path).mtimeMs : -Infinity
const changed = sources.filter((source) => mtime(source) > mtime(outputOf(source)))

// Output without a source: a deleted or moved file's JavaScript and source map.
const expected = new Set(sources.map(outputOf))
const stale: string[] = []
// The embedded database's template is data, not output: PostgreSQL needs its empty directories.
const template = join(outdir, 'embedded-template')
const removeStale = (dir: string): void => {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (path === template || path.startsWith(`${template}.building-`) || path === vendorDir(outdir)) continue
    if (entry.isDirectory()) {
      removeStale(path)
      if (readdirSync(path).length === 0) rmSync(path, { recursive: true })
    } else if (/\.js(\.map)?$/.test(entry.name) && !expected.has(path.replace(/\.map$/, ''))) {
      rmSync(path)
      stale.push(path)
    }
  }
}
if (existsSync(outdir)) removeStale(outdir)

if (changed.length > 0) await stripTypes(root, changed, outdir, { sourcemap: true })
// The vendored libraries bundled, as `npm run build` bundles them (scripts/vendor.ts).
await bundleVendored(root, outdir)
useVendored(outdir, changed.map(outputOf))
// The configuration's validator as code (scripts/config-validator.ts), again when its schema or
// its writer changed. Without one written for its schema, loadConfig compiles the schema itself.
if (changed.some((source) => source === join(root, 'config.ts') || source === join(root, 'scripts', 'config-validator.ts'))) {
  execFileSync(process.execPath, [join(outdir, 'scripts', 'config-validator.js')], { stdio: 'inherit' })
}
const removed = stale.length > 0 ? `, ${stale.length} stale removed` : ''
console.log(`dist/: ${changed.length} of ${sources.length} files built${removed} (${Math.round(performance.now() - started)} ms)`)

// The template again when it may be out of date: none yet, a migration added, changed or gone, or
// the dependencies changed (PGlite's version). The server also checks its stamp, and ignores a
// template not made by its code.
const migrations = join(root, 'db', 'migrations')
const stamp = join(template, 'STAMP')
if (!existsSync(stamp) || changed.some((source) => source.startsWith(migrations)) || stale.some((path) => path.startsWith(join(outdir, 'db', 'migrations'))) ||
  mtime(join(root, 'package-lock.json')) > mtime(stamp)) {
  execFileSync(process.execPath, [join(outdir, 'scripts', 'embedded-template.js')], { stdio: 'inherit' })
}
