// The embedded database's threads (db/pglite-thread.ts), recorded as they start, so a test
// can end one as a crash would. Import it before the threads start: it swaps the Worker
// class of node:worker_threads for a subclass that records the database's threads (not the
// password-hashing pool's).
import { syncBuiltinESMExports } from 'node:module'
import threads from 'node:worker_threads'

const serving: threads.Worker[] = []

class RecordedWorker extends threads.Worker {
  constructor (filename: string | URL, options?: threads.WorkerOptions) {
    super(filename, options)
    if (String(filename).includes('pglite.worker')) serving.push(this)
  }
}
threads.Worker = RecordedWorker
syncBuiltinESMExports()

/** The most recently started serving thread. */
export function lastDatabaseThread (): threads.Worker {
  const worker = serving.at(-1)
  if (worker === undefined) throw new Error('no database thread has started')
  return worker
}
