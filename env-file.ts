// `.env` for people at a terminal: `npm start`, `npm run dev` and `npm run migrate` read it from
// the current directory, when there is one, for the settings the environment does not give
// (a variable set in the environment wins). Nothing else reads it: not `node dist/server.js`
// run by an image or a process manager, and not the servers the tests, the fleet and the bench
// start, which are given their whole environment (a developer's `.env` must not reach them).
// Hence this check rather than node's --env-file-if-exists in the npm scripts: the flags of
// `npm start` are the production flags every such server is started with (production-flags.ts).
import { existsSync } from 'node:fs'

/** The npm scripts whose process reads `.env` (npm names the running one in npm_lifecycle_event). */
const READ_BY = new Set(['start', 'dev', 'migrate'])

/** Loads `path` into process.env (process.loadEnvFile: Node 20.12 and later) when `env` says an npm script above runs. */
export function loadEnvFile (path = '.env', env: NodeJS.ProcessEnv = process.env): boolean {
  if (!READ_BY.has(env.npm_lifecycle_event ?? '') || !existsSync(path)) return false
  process.loadEnvFile(path)
  return true
}
