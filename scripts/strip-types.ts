// The one esbuild call that turns the TypeScript sources into the JavaScript node runs, each
// file on its own (types stripped, nothing bundled), for npm start (scripts/build-changed.ts)
// and the tests (scripts/test.ts). `npm run typecheck` checks the types; `npm run build`
// (tsc) makes the image's build.
import { relative } from 'node:path'
import { build } from 'esbuild'

export async function stripTypes (root: string, files: string[], outdir: string, { sourcemap = false } = {}): Promise<void> {
  await build({
    entryPoints: files.map((file) => relative(root, file)),
    absWorkingDir: root,
    outdir,
    outbase: '.',
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap,
    logLevel: 'warning'
  })
}
