// The embedded database's own thread: PGlite runs here, so the server's event loop only
// posts SQL and receives rows (db/pglite-thread.ts is the other end). Requests are answered
// in the order they arrive; PGlite runs one at a time. Nothing here outlives a failure: an
// error PGlite cannot answer as a query error ends the thread, and the server sees it.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads'
import { parse, PGlite, protocol, type Results } from '@electric-sql/pglite'
import { statementName } from './statement-name.js'
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
    const name = statementName(request.sql)
    const params = request.params ?? []
    const run = name === undefined ? pglite.query(request.sql, params as unknown[], { rowMode: 'object' }) : runNamed(pglite, name, request.sql, params)
    run.then(
      ({ rows, affectedRows }) => { port.postMessage({ id: request.id, rows, affectedRows } satisfies ThreadReply) },
      (err: unknown) => { port.postMessage({ id: request.id, error: queryError(err) } satisfies ThreadReply) })
  })
  port.postMessage({ id: 0, rows: [] } satisfies ThreadReply)
}

const { serialize } = protocol
/** The named statements of this session: the types of their parameters. */
const statements = new Map<string, number[]>()

// A prepared query (db/prepared.ts) as a named statement: parsed and planned on its first
// run, then each run is one call into PostgreSQL (bind, describe, execute, sync), where
// PGlite's query() makes six and plans the text every time.
function runNamed (pglite: PGlite, name: string, sql: string, params: readonly unknown[]): Promise<Results> {
  return pglite.runExclusive(async () => {
    let types = statements.get(name)
    if (types === undefined) {
      const { messages } = await pglite.execProtocol(concat([
        serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()
      ]))
      types = parse.parseDescribeStatementResults(messages)
      statements.set(name, types)
    }
    const values = params.map((value, i) => {
      if (value === null || value === undefined) return null
      const serializer = pglite.serializers[types[i]!]
      return serializer === undefined ? String(value) : serializer(value)
    })
    const { messages } = await pglite.execProtocol(concat([
      serialize.bind({ statement: name, values }), serialize.describe({ type: 'P' }), serialize.execute({}), serialize.sync()
    ]))
    return parse.parseResults(messages, pglite.parsers, { rowMode: 'object' })[0]!
  })
}

function concat (parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

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

serve(port).catch(fail)
