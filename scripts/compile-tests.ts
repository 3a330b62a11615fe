// `npm test`'s first step: the service and the unit tests as JavaScript under .tap/build/,
// where the unit suite runs (package.json "test"). Types are stripped, not checked (that is
// `npm run typecheck`), by esbuild file by file, in well under a second.
//
// Why not tsx, as `npm run test:file` and the integration suite use: tsx compiles as the
// modules load, in every process and in every thread. Each embedded database's thread then
// paid ~0.6 s of CPU to load tsx and PGlite through it, twice the thread's own start-up,
// and a suite starts about fifty of them.
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const outdir = join(root, '.tap', 'build')

// What the unit suite loads: tsconfig.json's files, less the benchmark and the examples.
const { include } = JSON.parse(readFileSync(join(root, 'tsconfig.json'), 'utf8')) as { include: string[] }
const sources = include.filter((entry) => entry !== 'bench' && entry !== 'examples').flatMap((entry) => typeScriptFiles(join(root, entry)))

function typeScriptFiles (path: string): string[] {
  if (!statSync(path).isDirectory()) return path.endsWith('.ts') ? [path] : []
  return readdirSync(path).flatMap((name) => typeScriptFiles(join(path, name)))
}

// A clean directory: a source deleted since the last run must not leave its test behind.
rmSync(outdir, { recursive: true, force: true })
await build({
  entryPoints: sources.map((file) => relative(root, file)),
  absWorkingDir: root,
  outdir,
  outbase: '.',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  logLevel: 'warning'
})
