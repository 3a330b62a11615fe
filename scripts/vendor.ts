// The two libraries whose many small modules were a fifth of every start (issue 34): Kysely's
// ESM build is 255 files and TypeBox's 373, each resolved, read, compiled and linked on its own
// (~180 and ~220 ms of a 1.6 s start on the slow VM; bundled, ~30 and ~26 ms). The build bundles
// each entry we import into dist/vendor (esbuild, one graph with shared chunks, so every entry
// shares one copy of each library) and points dist/'s imports at them. The code is the
// libraries' own, unchanged; the sources and the tests still import the packages. Both builds
// run it: `npm run build` (tsc, then `node dist/scripts/vendor.js`) and `npm start`'s
// (scripts/build-changed.ts).
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

/** Each import we bundle, and its file under dist/vendor. A new subpath must be added here: the build refuses one it does not know. */
const VENDORED: Record<string, string> = {
  kysely: 'kysely',
  'kysely/migration': 'kysely-migration',
  typebox: 'typebox',
  'typebox/value': 'typebox-value'
}
const VENDORED_PACKAGE = /^(?:kysely|typebox)(?:\/|$)/
// An import's specifier in compiled output: `from '…'`, `import '…'`, `import('…')`.
const SPECIFIER = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])([^'"\n]+)\2/g

/** Where the bundles go: not the output of any source. */
export const vendorDir = (outdir: string): string => join(outdir, 'vendor')

/** Bundles the vendored entries into dist/vendor when they are missing or older than the installed packages (package-lock.json). */
export async function bundleVendored (root: string, outdir: string): Promise<void> {
  const dir = vendorDir(outdir)
  const lock = join(root, 'package-lock.json')
  const built = Object.values(VENDORED).map((name) => join(dir, `${name}.js`))
  if (built.every((file) => existsSync(file) && (!existsSync(lock) || statSync(file).mtimeMs >= statSync(lock).mtimeMs))) return
  await build({
    // Resolved from here, as the project resolves them: their ESM builds.
    entryPoints: Object.fromEntries(Object.entries(VENDORED).map(([specifier, name]) => [name, fileURLToPath(import.meta.resolve(specifier))])),
    absWorkingDir: root,
    outdir: dir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    logLevel: 'warning'
  })
}

/** Points the imports of the vendored packages in these compiled files at dist/vendor. */
export function useVendored (outdir: string, files: readonly string[]): void {
  const dir = vendorDir(outdir)
  for (const file of files) {
    if (file.startsWith(dir + '/')) continue
    const text = readFileSync(file, 'utf8')
    const rewritten = text.replace(SPECIFIER, (whole, lead: string, quote: string, specifier: string) => {
      if (!VENDORED_PACKAGE.test(specifier)) return whole
      const name = VENDORED[specifier]
      if (name === undefined) throw new Error(`${relative(outdir, file)} imports ${specifier}: add it to VENDORED in scripts/vendor.ts`)
      const path = relative(dirname(file), join(dir, `${name}.js`))
      return `${lead}${quote}${path.startsWith('.') ? path : `./${path}`}${quote}`
    })
    if (rewritten !== text) writeFileSync(file, rewritten)
  }
}

/** Every compiled file under `dir` (the template's data aside). */
export function compiledFiles (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return entry.name === 'embedded-template' || entry.name === 'vendor' ? [] : compiledFiles(path)
    return entry.name.endsWith('.js') ? [path] : []
  })
}

// `npm run build`: after tsc, every file of dist/.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const outdir = join(dirname(fileURLToPath(import.meta.url)), '..')
  const root = join(outdir, '..')
  await bundleVendored(root, outdir)
  useVendored(outdir, compiledFiles(outdir))
}
