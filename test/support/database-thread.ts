// The embedded database's threads (db/engine/pglite-thread.ts), recorded as they start by their
// data directory, so a test can end one as a crash would. Import it before the threads
// start: it swaps the Worker class of node:worker_threads for a subclass that records the
// database's threads (not the password-hashing pool's).
import { syncBuiltinESMExports } from 'node:module'
import { resolve } from 'node:path'
import threads from 'node:worker_threads'
import type { ThreadData } from '../../db/engine/pglite-thread.js'

const serving = new Map<string, threads.Worker>()
let last: threads.Worker | undefined

class RecordedWorker extends threads.Worker {
  constructor (filename: string | URL, options?: threads.WorkerOptions) {
    super(filename, options)
    if (!String(filename).includes('pglite.worker')) return
    serving.set((options?.workerData as ThreadData).dataDir, this)
    last = this
  }
}
threads.Worker = RecordedWorker
syncBuiltinESMExports()

/** The thread serving the embedded database of an app whose DATA_DIR is `dataDir`. */
export function databaseThreadOf (dataDir: string): threads.Worker {
  const worker = serving.get(resolve(dataDir, 'pglite'))
  if (worker === undefined) throw new Error(`no database thread has started for ${dataDir}`)
  return worker
}

/** The most recently started thread: a server's only one (test/integration/crash-database-thread.ts). */
export function lastDatabaseThread (): threads.Worker {
  if (last === undefined) throw new Error('no database thread has started')
  return last
}
