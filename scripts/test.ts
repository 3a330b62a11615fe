// The one way the tests run (npm test, test:file, test:integration, test:fleet): the service
// and the tests compiled to JavaScript under .tap/build/<pid>/, the migrated embedded database built
// once (test/support/setup.ts), then tap on the compiled files with the settings of .taprc.
//
//   tsx scripts/test.ts                  the unit suites: one per folder of test/ holding test
//                                        files (test/integration and test/fleet have their own
//                                        commands), each a process importing its files in turn
//   tsx scripts/test.ts <file|folder>…   those test files (as in the source tree), a process each
//
// Arguments starting with `-` go to tap as they are (test:fleet's longer timeout).
//
// Why compiled, always: under tsx every process and every thread compiles as the modules load,
// and the service starts threads (each app's embedded database, its hashing pool) that must load
// tsx again. test/tasks/tasks.test.ts alone took 6.0–6.3 s of CPU under tsx and 3.9–4.0 s compiled.
// esbuild strips the types file by file (checking them is `npm run typecheck`) in under a second.
import { execFileSync, spawnSync } from 'node:child_process'
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { stripTypes } from './strip-types.js'
import { bundleVendored, compiledFiles, useVendored } from './vendor.js'

const root = fileURLToPath(new URL('..', import.meta.url))
// A build of this run's own, so that two test commands at once (npm test, and test:file in
// another terminal) do not delete each other's files; removed when tap is done.
const outdir = join(root, '.tap', 'build', String(process.pid))
const testDir = join(root, 'test')
// Folders of test/ that are not unit suites: they have commands of their own.
const NOT_UNIT = new Set(['integration', 'fleet'])

const args = process.argv.slice(2)
const tapArgs = args.filter((arg) => arg.startsWith('-'))
const targets = args.filter((arg) => !arg.startsWith('-'))

function filesUnder (path: string): string[] {
  if (!statSync(path).isDirectory()) return [path]
  return readdirSync(path).flatMap((name) => filesUnder(join(path, name)))
}

// What runs: tsconfig.json's folders and files, less the benchmark (the examples' typed client
// is run by the integration suite).
const { include } = JSON.parse(readFileSync(join(root, 'tsconfig.json'), 'utf8')) as { include: string[] }
const sources = include.filter((entry) => entry !== 'bench').flatMap((entry) => filesUnder(join(root, entry)))

// What runs that ended without removing their build left behind (interrupted): their process is gone.
mkdirSync(dirname(outdir), { recursive: true })
for (const name of readdirSync(dirname(outdir))) {
  if (!/^\d+$/.test(name) || !alive(Number(name))) rmSync(join(dirname(outdir), name), { recursive: true, force: true })
}
function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}
await stripTypes(root, sources.filter((file) => file.endsWith('.ts')), outdir)
// Plain JavaScript beside the sources (a preload of the integration suite) comes along as it is.
for (const file of sources.filter((file) => /\.[cm]?js$/.test(file))) cpSync(file, join(outdir, relative(root, file)))
// The vendored libraries bundled, as the builds of the service bundle them (scripts/vendor.ts): the
// tests run the code that runs in production, and each test process loads them faster.
await bundleVendored(root, outdir)
useVendored(outdir, compiledFiles(outdir))
// The configuration's validator as code, as the builds of the service write it.
execFileSync(process.execPath, [join(outdir, 'scripts', 'config-validator.js')], { stdio: 'inherit' })

const compiled = (file: string) => join(outdir, relative(root, resolve(file)).replace(/\.ts$/, '.js'))
const isTestFile = (file: string) => file.endsWith('.test.ts')

/** The unit suites: each folder of test/ (test/ itself included) with test files directly in it. */
function unitSuites (): Array<{ name: string, folder: string }> {
  const folders = [testDir, ...readdirSync(testDir).filter((name) => !NOT_UNIT.has(name)).map((name) => join(testDir, name))]
  return folders
    .filter((folder) => statSync(folder).isDirectory())
    .map((folder) => {
      const tests = readdirSync(folder).filter(isTestFile)
      const size = tests.reduce((sum, file) => sum + statSync(join(folder, file)).size, 0)
      return { name: folder === testDir ? 'test' : relative(testDir, folder), folder, size, tests: tests.length }
    })
    .filter((suite) => suite.tests > 0)
    // The largest first: with fewer processes at a time than suites, the long ones start at once
    // and the small ones fill in after, so that they end about together.
    .sort((a, b) => b.size - a.size)
}

let files: string[]
if (targets.length > 0) {
  files = targets.flatMap((target) => filesUnder(target).filter(isTestFile)).map(compiled)
  if (files.length === 0) throw new Error(`no test files in ${targets.join(' ')}`)
} else {
  // A suite is a generated file in the build's suites/ that runs its folder (test/support/suite.ts).
  const suitesDir = join(outdir, 'suites')
  mkdirSync(suitesDir, { recursive: true })
  const runner = compiled(join(testDir, 'support', 'suite.ts'))
  // Numbered: tap starts its files in the order of their names.
  files = unitSuites().map(({ name, folder }, index) => {
    const file = join(suitesDir, `${String(index + 1).padStart(2, '0')}-${name}.js`)
    const importPath = relative(dirname(file), runner)
    writeFileSync(file, `import { runSuite } from './${importPath}'\n\nawait runSuite(${JSON.stringify(compiled(folder))})\n`)
    return file
  })
}

const run = (command: string, ...rest: string[]) => spawnSync(command, rest, { stdio: 'inherit', cwd: root }).status ?? 1
let status = run(process.execPath, compiled(join(testDir, 'support', 'setup.ts')))
if (status === 0) status = run(join(root, 'node_modules', '.bin', 'tap'), ...tapArgs, ...files.map((file) => relative(root, file)))
rmSync(outdir, { recursive: true, force: true })
process.exit(status)
