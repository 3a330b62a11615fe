// Reads the configuration, listens, and shuts down gracefully: on SIGTERM it first drains
// (/ready answers 503 while requests are still served, for SHUTDOWN_DRAIN_MS, so a load
// balancer stops sending it work before its port closes), on SIGINT it closes at once; either
// way in-flight requests finish, then the database closes. Exits 1 if the app closed itself
// because the embedded database failed.
import { resolve } from 'node:path'
import closeWithGrace from 'close-with-grace'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import serviceApp from './app.js'
import { serverOptions } from './server-options.js'
import { ConfigError, loadConfig } from './config.js'
import { loadEnvFile } from './env-file.js'
import { StartRefusal } from './errors.js'

let config
try {
  loadEnvFile()
  config = loadConfig()
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(err.message)
    process.exit(1)
  }
  throw err
}

const app = Fastify(serverOptions(config))
app.register(fp(serviceApp), { config })

// SIGTERM is how orchestrators, process managers and deploy scripts stop an instance that a
// balancer may still be sending work to; SIGINT is a person at a terminal, and an error leaves
// nothing worth serving on. The 10 s bound on closing starts after the longest drain (three
// times SHUTDOWN_DRAIN_MS while requests keep coming: plugins/app/graceful-close.ts).
const drainMs = config.http.shutdownDrainMs
const grace = closeWithGrace({ delay: 3 * drainMs + 10_000 }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'closing because of an error')
  else app.log.info({ signal, drainMs: signal === 'SIGTERM' ? drainMs : 0 }, 'shutting down')
  if (signal === 'SIGTERM' && drainMs > 0) await app.drain(drainMs)
  await app.close()
})
// The app may close itself: when the embedded database fails, plugins/app/db.ts sets
// exit code 1 and closes it. The process then ends with that code (close-with-grace would
// exit 0 when the event loop empties), and within 10 s even if a handle stays open.
app.addHook('onClose', (_instance, done) => {
  grace.uninstall()
  setTimeout(() => process.exit(), 10_000).unref()
  done()
})

let address: string
try {
  address = await app.listen({ port: config.http.port, host: config.http.host })
} catch (err) {
  // Another process has the embedded database, or the way to PostgreSQL breaks what the service
  // relies on: a refusal, not a fault, so one line, like a bad setting.
  if (err instanceof StartRefusal) console.error(err.message)
  else app.log.error({ err }, 'could not start')
  // What did start stops first (the hashing threads, the database's thread or pool): exiting
  // with a thread still loading its module can abort the process (plugins/app/passwords.ts).
  // Bounded: a part that does not close in time is stopped with the process.
  await Promise.race([app.close().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 5_000).unref())])
  process.exit(1)
}

// For whoever ran npm start or npm run dev: where to read the API, where the data is kept.
const docs = `${address.replace(/\/\/(0\.0\.0\.0|\[::\]):/, '//localhost:')}/docs`
const data = config.db.url === undefined
  ? `${resolve(config.db.dataDir)} (embedded database)`
  : `PostgreSQL at ${databaseAddress(config.db.url)}`
app.log.info(`API reference at ${docs}; data in ${data}`)

/** host:port/database of a postgres:// URL, without its credentials. */
function databaseAddress (url: string): string {
  const { host, pathname } = new URL(url)
  return `${host}${pathname}`
}
