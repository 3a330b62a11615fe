// The embedded database's own thread: PGlite runs here, so the server's event loop only
// posts SQL and receives rows (db/pglite-thread.ts is the other end). Requests are answered
// in the order they arrive; PGlite runs one at a time. Nothing here outlives a failure: an
// error PGlite cannot answer as a query error ends the thread, and the server sees it.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads'
import { PGlite } from '@electric-sql/pglite'
import { pgliteParsers } from './timestamps.js'
import type { ThreadData, ThreadReply, ThreadRequest, ThreadError } from './pglite-thread.js'

const { dataDir, settings, initOnly, wasmModule, fsBundle } = workerData as ThreadData
const port = parentPort
if (port === null) throw new Error('db/pglite.worker.ts runs as a worker thread')

// No top-level await: under tsx (development, tests) this file is loaded with require().
async function serve (port: MessagePort): Promise<void> {
  const pglite = await PGlite.create(dataDir, {
    parsers: pgliteParsers,
    pgliteWasmModule: wasmModule,
    fsBundle,
    startParams: [...PGlite.defaultStartParams, ...settings.flatMap((setting) => ['-c', setting])]
  })
  if (initOnly) {
    // A fresh directory was initialised: initdb's memory goes with this thread.
    await pglite.close()
    port.close()
    return
  }
  port.on('message', (request: ThreadRequest) => {
    if (request.sql === undefined) {
      pglite.close().then(() => {
        port.postMessage({ id: request.id, rows: [] } satisfies ThreadReply)
        port.close()
      }, fail)
      return
    }
    pglite.query(request.sql, request.params as unknown[] | undefined, { rowMode: 'object' }).then(
      ({ rows, affectedRows }) => { port.postMessage({ id: request.id, rows, affectedRows } satisfies ThreadReply) },
      (err: unknown) => { port.postMessage({ id: request.id, error: queryError(err) } satisfies ThreadReply) })
  })
  port.postMessage({ id: 0, rows: [] } satisfies ThreadReply)
}

serve(port).catch(fail)

// Thrown outside any promise: the thread ends with an uncaught error, which the server sees.
function fail (err: unknown): void {
  process.nextTick(() => { throw err })
}

// PostgreSQL's error fields (code, constraint, detail, …) as plain data: an Error's own
// properties do not survive the copy between threads.
function queryError (err: unknown): ThreadError {
  if (!(err instanceof Error)) return { message: String(err) }
  const fields: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(err)) {
    if (typeof value === 'string' || typeof value === 'number') fields[key] = value
  }
  return { ...fields, message: err.message }
}
