// The node flags production starts the service with: those of `npm start` in package.json,
// which the Dockerfile repeats (test/integration/server.test.ts checks they agree). The benchmark and
// the tests that run server.ts as a process start it with the same flags, so what they
// measure is what runs.
//
// --no-allocation-site-pretenuring: under sustained load V8 decided that objects allocated
// while reading a page of tasks (pg's rows and strings, the timestamps, the serializer's
// pieces) outlive young collections and began allocating them straight into the old
// generation; from there they kept the next young objects alive too. Each scavenge then
// copied ~1.7 MB and promoted ~1.3 MB (4–5 ms pauses every ~30 ms), the old generation
// filled with garbage between full GCs and RSS passed 300 MB. Without pretenuring those
// objects die young: GET /tasks +23 % req/s, −20 % CPU per request, peak RSS ~156 MB
// (bench/README.md).
//
// --heap-growing-percent=100: after a full GC V8 lets the heap grow to ~4× what survived
// before the next one. With pages of 1,000 tasks on the embedded database that was 34 MB
// live and 145 MB before each collection, and the service peaked at 430–450 MB; at 2× the
// collections come at ~72 MB, about once a second (5–10 ms each, mostly concurrent), and the
// peak is ~360 MB, with no loss of req/s on either database (bench/README.md).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export function productionNodeFlags (root: string): string[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts?: { start?: string } }
  const start = pkg.scripts?.start ?? ''
  // `exec`: the shell npm runs the script in becomes node, so npm's SIGTERM reaches the server.
  const match = /^exec node((?: --[\w-]+(?:=\S+)?)*) dist\/server\.js$/.exec(start)
  if (match === null) throw new Error(`package.json "start" is not "exec node [--flags] dist/server.js": ${start}`)
  return match[1]!.split(' ').filter(Boolean)
}
