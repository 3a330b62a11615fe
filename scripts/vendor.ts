// The libraries whose many small modules were the largest part of every start (issue 34):
// Kysely's ESM build is 255 files, TypeBox's 373, prom-client's 33 and the OpenTelemetry API's
// 45, each resolved, read, compiled and linked on its own (~180, ~220, ~90 and ~45 ms of a
// 1.6 s start on the slow VM; bundled, ~30, ~26, ~36 and ~14 ms). The build bundles each entry
// we import into dist/vendor (esbuild, one graph with shared chunks, so every entry shares one
// copy of each library) and points dist/'s imports at them. The code is the libraries' own,
// unchanged; the sources still import the packages. Every build runs it: `npm run build` (tsc,
// then `node dist/scripts/vendor.js`), `npm start`'s (scripts/build-changed.ts) and the tests'
// (scripts/test.ts), so the tests run what production runs.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

/**
 * Each import we bundle, and its file under dist/vendor. A new subpath must be added here: the
 * build refuses one it does not know. `commonJs`: a CommonJS package, whose bundle gets named
 * exports for every property of its exports object (Node finds them by reading the CommonJS
 * source; a bundle has only what it declares).
 */
const VENDORED: Record<string, { file: string, commonJs?: true }> = {
  kysely: { file: 'kysely' },
  'kysely/migration': { file: 'kysely-migration' },
  typebox: { file: 'typebox' },
  'typebox/value': { file: 'typebox-value' },
  // 33 files, 80-98 ms to load on the slow VM; bundled, 34-38 ms.
  'prom-client': { file: 'prom-client', commonJs: true },
  // 45 files, 40-62 ms; bundled, 14 ms. The API finds the tracer provider the SDK registers
  // (plugins/tracing.ts) through a global, whichever copy of it asks.
  '@opentelemetry/api': { file: 'opentelemetry-api', commonJs: true },
  // 18 files of its own and ~90 more it requires as it registers (yaml's 73, for YAML output
  // the service never asks for): importing and registering it beside one route, to ready(),
  // 103–157 ms (medians 130, 136) → 85–148 ms (105, 106) on the slow VM.
  '@fastify/swagger': { file: 'fastify-swagger', commonJs: true },
  // ajv's 83 files, required by our validators, ajv-formats, fast-json-stringify and Fastify's
  // default validator compiler (given to Fastify by server-options.ts, so that Fastify does
  // not require its own), and fast-jwt's with asn1.js under @fastify/jwt: `require()` of each
  // alone on the slow VM, ajv 32–85 → 12–18 ms, fast-jwt 32–50 → 14–28 ms. Files a start
  // opens: 545 → 408.
  ajv: { file: 'ajv', commonJs: true },
  'ajv/dist/2020.js': { file: 'ajv-2020', commonJs: true },
  'ajv/dist/standalone/index.js': { file: 'ajv-standalone', commonJs: true },
  'ajv-formats': { file: 'ajv-formats', commonJs: true },
  '@fastify/ajv-compiler': { file: 'fastify-ajv-compiler', commonJs: true },
  '@fastify/jwt': { file: 'fastify-jwt', commonJs: true },
  '@fastify/fast-json-stringify-compiler': { file: 'fastify-fast-json-stringify-compiler', commonJs: true },
  // With ip-address's 9 files and toad-cache: 19–29 → 10–15 ms to require() on the slow VM.
  '@fastify/rate-limit': { file: 'fastify-rate-limit', commonJs: true }
}
/** A specifier's package: `@scope/name` or `name`, without a subpath. */
const packageOf = (specifier: string): string => specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/')
const VENDORED_PACKAGES = new Set(Object.keys(VENDORED).map(packageOf))
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/
// An import's specifier in compiled output: `from '…'`, `import '…'`, `import('…')`.
const SPECIFIER = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])([^'"\n]+)\2/g

/** Where the bundles go: not the output of any source. */
export const vendorDir = (outdir: string): string => join(outdir, 'vendor')

/** Bundles the vendored entries into dist/vendor when they are missing or older than the installed packages (package-lock.json). */
export async function bundleVendored (root: string, outdir: string): Promise<void> {
  const dir = vendorDir(outdir)
  const lock = join(root, 'package-lock.json')
  const built = Object.values(VENDORED).map(({ file }) => join(dir, `${file}.js`))
  if (built.every((file) => existsSync(file) && (!existsSync(lock) || statSync(file).mtimeMs >= statSync(lock).mtimeMs))) return
  const wrappers = mkdtempSync(join(tmpdir(), 'vendor-'))
  try {
    const require = createRequire(import.meta.url)
    const entryPoints = Object.fromEntries(Object.entries(VENDORED).map(([specifier, { file, commonJs }]) => {
      // Resolved from here, as the project resolves them (an ES module package's ESM build).
      const resolved = fileURLToPath(import.meta.resolve(specifier))
      if (commonJs !== true) return [file, resolved]
      const names = Object.keys(require(specifier) as object).filter((name) => IDENTIFIER.test(name) && name !== 'default')
      const wrapper = join(wrappers, `${file}.mjs`)
      writeFileSync(wrapper, `import m from ${JSON.stringify(resolved)}\nexport const { ${names.join(', ')} } = m\nexport default m\n`)
      return [file, wrapper]
    }))
    await build({
      entryPoints,
      absWorkingDir: root,
      outdir: dir,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      // CommonJS code bundled as ES modules still calls require() for Node's own modules.
      banner: { js: "import { createRequire as __vendorRequire } from 'node:module'; const require = __vendorRequire(import.meta.url);" },
      logLevel: 'warning'
    })
  } finally {
    rmSync(wrappers, { recursive: true, force: true })
  }
}

/** Points the imports of the vendored packages in these compiled files at dist/vendor. */
export function useVendored (outdir: string, files: readonly string[]): void {
  const dir = vendorDir(outdir)
  for (const file of files) {
    if (file.startsWith(dir + '/')) continue
    const text = readFileSync(file, 'utf8')
    const rewritten = text.replace(SPECIFIER, (whole, lead: string, quote: string, specifier: string) => {
      if (!VENDORED_PACKAGES.has(packageOf(specifier))) return whole
      const vendored = VENDORED[specifier]
      if (vendored === undefined) throw new Error(`${relative(outdir, file)} imports ${specifier}: add it to VENDORED in scripts/vendor.ts`)
      const path = relative(dirname(file), join(dir, `${vendored.file}.js`))
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
