// The embedded database's own thread: PGlite runs here, so the server's event loop only
// posts SQL and receives rows (db/engine/pglite-thread.ts is the other end). Requests are answered
// in the order they arrive; PGlite runs one at a time. Nothing here outlives a failure: an
// error PGlite cannot answer as a query error ends the thread, and the server sees it.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads'
import { parse, PGlite, protocol } from '@electric-sql/pglite'
import { statementName } from './statement-name.js'
import { pgliteParsers } from './timestamps.js'
import type { ThreadData, ThreadError, ThreadNotice, ThreadReply, ThreadRequest } from './pglite-thread.js'

const { dataDir, settings, wasmModule, fsBundle } = workerData as ThreadData
const port = parentPort
if (port === null) throw new Error('db/engine/pglite.worker.ts runs as a worker thread')

// No top-level await: under tsx (development, tests) this file is loaded with require().
async function serve (port: MessagePort): Promise<void> {
  const pglite = await PGlite.create(dataDir, {
    parsers: pgliteParsers,
    pgliteWasmModule: wasmModule,
    fsBundle,
    startParams: [...PGlite.defaultStartParams, ...settings.flatMap((setting) => ['-c', setting])]
  })
  // Notifications (LISTEN/NOTIFY) go to the server as they come, so each is there before the
  // answer to the query whose commit sent it: PGlite's query() tells them to this listener
  // before its result resolves; a named statement's answer is read here (readAnswer).
  const notify = (channel: string, payload: string) => { port.postMessage({ notice: { channel, payload } } satisfies ThreadNotice) }
  pglite.onNotification(notify)
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
    const run = name === undefined ? pglite.query(request.sql, params as unknown[], { rowMode: 'object' }) : runNamed(pglite, name, request.sql, params, notify)
    run.then(
      ({ rows, affectedRows }) => { port.postMessage({ id: request.id, rows, affectedRows } satisfies ThreadReply) },
      (err: unknown) => { port.postMessage({ id: request.id, error: queryError(err) } satisfies ThreadReply) })
  })
  port.postMessage({ id: 0, rows: [] } satisfies ThreadReply)
}

const { serialize } = protocol
/** The named statements of this session: the types of their parameters. */
const statements = new Map<string, number[]>()

// A prepared query (db/engine/prepared.ts) as a named statement: parsed and planned on its first
// run, then each run is one call into PostgreSQL (bind, describe, execute, sync), where
// PGlite's query() makes six and plans the text every time. Its answer is read here from the
// wire bytes (readAnswer): PGlite's own reader copies every field into an ArrayBuffer of its
// own before decoding it, the larger part of the thread's CPU per GET /tasks.
function runNamed (pglite: PGlite, name: string, sql: string, params: readonly unknown[], notify: Notify): Promise<Answer> {
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
    const chunks: Uint8Array[] = []
    await pglite.execProtocolRawStream(concat([
      serialize.bind({ statement: name, values }), serialize.describe({ type: 'P' }), serialize.execute({}), serialize.sync()
    ]), { syncToFs: true, onRawData: (chunk) => { chunks.push(chunk.slice()) } })
    return readAnswer(chunks.length === 1 ? chunks[0]! : concat(chunks), pglite.parsers, notify)
  })
}

type Notify = (channel: string, payload: string) => void
interface Answer { rows: Array<Record<string, unknown>>, affectedRows: number }
type Parsers = Record<number | string, ((text: string, typeId: number) => unknown) | undefined>

// PostgreSQL's error fields by their one-letter code, as PGlite's DatabaseError names them.
const ERROR_FIELDS = new Map(('S severity C code M message D detail H hint P position p internalPosition ' +
  'q internalQuery W where s schema t table c column d dataType n constraint F file L line R routine')
  .match(/\S+ \S+/g)!.map((pair) => pair.split(' ') as [string, string]))
const COUNTED_COMMANDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'COPY', 'MERGE'])

/**
 * The rows and the affected-row count of one execution, read from the backend's messages
 * (RowDescription, DataRow, CommandComplete, ErrorResponse, NotificationResponse: told to
 * `notify`; the rest carry nothing we keep), with the same parsers and results as PGlite's
 * query(). An ErrorResponse is thrown.
 */
function readAnswer (data: Uint8Array, parsers: Parsers, notify: Notify): Answer {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  const text = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  const cstring = (from: number) => {
    const end = data.indexOf(0, from)
    return { value: text.toString('utf8', from, end), next: end + 1 }
  }
  let names: string[] = []
  let typeIds: number[] = []
  const rows: Array<Record<string, unknown>> = []
  let affectedRows = 0
  let error: Record<string, string> | undefined
  for (let at = 0; at < data.length;) {
    const type = data[at]!
    const start = at + 5
    at += 1 + view.getInt32(at + 1)
    if (type === 0x54) { // T: RowDescription
      const count = view.getInt16(start)
      names = []
      typeIds = []
      for (let i = 0, p = start + 2; i < count; i++) {
        const name = cstring(p)
        names.push(name.value)
        typeIds.push(view.getInt32(name.next + 6))
        p = name.next + 18
      }
    } else if (type === 0x44) { // D: DataRow
      const row: Record<string, unknown> = {}
      const count = view.getInt16(start)
      for (let i = 0, p = start + 2; i < count; i++) {
        const length = view.getInt32(p)
        p += 4
        if (length === -1) {
          row[names[i]!] = null
          continue
        }
        const value = text.toString('utf8', p, p + length)
        p += length
        const parser = parsers[typeIds[i]!]
        row[names[i]!] = parser === undefined ? value : parser(value, typeIds[i]!)
      }
      rows.push(row)
    } else if (type === 0x43) { // C: CommandComplete, "UPDATE 3"
      const words = cstring(start).value.split(' ')
      if (COUNTED_COMMANDS.has(words[0]!)) affectedRows += Number(words.at(-1))
    } else if (type === 0x41) { // A: NotificationResponse: the sender's process id, the channel, the payload
      const channel = cstring(start + 4)
      notify(channel.value, cstring(channel.next).value)
    } else if (type === 0x45 && error === undefined) { // E: ErrorResponse
      error = {}
      for (let p = start; data[p] !== 0;) {
        const field = cstring(p + 1)
        const key = ERROR_FIELDS.get(String.fromCharCode(data[p]!))
        if (key !== undefined) error[key] = field.value
        p = field.next
      }
    }
  }
  if (error !== undefined) {
    const { message, ...fields } = error
    throw Object.assign(new Error(message), fields)
  }
  return { rows, affectedRows }
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
