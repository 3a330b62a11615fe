// The `pg` driver, loaded without the cost of its Cloudflare check on Node 20 (issue 34).
//
// As it loads, pg asks whether it runs in a Cloudflare Worker: by `navigator.userAgent` where
// there is a `navigator` (Node 21 and later), otherwise by building a `Response` and looking
// for Cloudflare's `cf` property. On Node 20 that `new Response()` loads Node's whole fetch
// implementation (undici), which nothing else at start-up needs: ~30 ms of a ~1 s start on
// the slow VM (`require('pg')` 49–76 → 23–57 ms; in a start's `--cpu-prof`, 39 ms of Node
// compiling its internal modules under pg's check). Where `navigator` is missing, pg is loaded
// with the one Node 21 and later define (its `userAgent` is `Node.js/<major>`, so the check
// answers "not Cloudflare" at once), and it is removed again before anything else runs: the
// load is synchronous, and no other code sees it. Where `navigator` exists, nothing changes.
import { createRequire } from 'node:module'
import type Pg from 'pg'

function loadPg (): typeof Pg {
  const require = createRequire(import.meta.url)
  const global = globalThis as { navigator?: unknown }
  if (global.navigator !== undefined) return require('pg') as typeof Pg
  global.navigator = { userAgent: `Node.js/${process.versions.node.split('.')[0]!}` }
  try {
    return require('pg') as typeof Pg
  } finally {
    delete global.navigator
  }
}

const pg = loadPg()
export default pg
