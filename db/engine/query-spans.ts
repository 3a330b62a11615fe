// A client span around every statement the service sends, on either database (the pg pool or
// the embedded thread): one wrapper around the driver's connections instead of an
// instrumentation per driver (OpenTelemetry's pg instrumentation hooks `require`, which an ESM
// service does not go through, and knows nothing of PGlite). Used only when tracing is on
// (plugins/tracing.ts); otherwise the dialect runs as it is.
//
// Only statements run for something already traced (a request) get a span: migrations and the
// background jobs' statements (run outside any request's context, jobs/scheduler.ts) would each
// be a trace of one span, every few seconds. A span is named by what its statement does, as
// OpenTelemetry's database conventions ask: `SELECT users`, `INSERT tasks`, `BEGIN`.
//
// A span carries the statement's text as compiled, with its $1… placeholders: the values,
// which hold users' data, are never recorded, nor an error's message (it may quote them), only
// its SQLSTATE code.
import { context, SpanKind, SpanStatusCode, trace, type Tracer, type TracerProvider } from '@opentelemetry/api'
import {
  ATTR_DB_COLLECTION_NAME, ATTR_DB_OPERATION_NAME, ATTR_DB_QUERY_TEXT, ATTR_DB_RESPONSE_STATUS_CODE, ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE, DB_SYSTEM_NAME_VALUE_POSTGRESQL
} from '@opentelemetry/semantic-conventions'
import type { CompiledQuery, DatabaseConnection, Dialect, Driver, QueryResult } from 'kysely'

/** The instrumentation scope of these spans: this module, which makes them. */
export const QUERY_SPANS_SCOPE = 'task-subscription-backend/db/engine/query-spans'

// Comments and string literals are skipped; a quoted identifier, a word, a parenthesis or a dot
// is a token.
const TOKEN = /--[^\n]*|\/\*[\s\S]*?\*\/|'(?:[^']|'')*'|"((?:[^"]|"")*)"|([A-Za-z_][\w$]*)|([().])/g
const DML = new Set(['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'MERGE'])
const WRITES = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE'])
/** Words after which a table's name comes, and the words that may stand between. */
const BEFORE_TABLE = new Set(['FROM', 'JOIN', 'INTO', 'UPDATE'])
const NOT_TABLES = new Set(['LATERAL', 'ONLY'])

/**
 * What a statement does, as OpenTelemetry's database conventions name it: its operation (the
 * first keyword, or for a WITH the first SELECT, INSERT, UPDATE, DELETE or MERGE in it, a
 * write before a read) and the first table it names (schema-qualified as written; for a WITH
 * that writes, the first table written), when they can be told from the text.
 */
export function describeStatement (sql: string): { operation: string | undefined, collection: string | undefined } {
  let operation: string | undefined
  let collection: string | undefined
  let withClause = false
  // Per parenthesis depth: whether a SELECT or DELETE began there. A FROM elsewhere belongs to a
  // function's arguments (extract(epoch from …), substring(… from …)).
  const queryAt: boolean[] = [false]
  let depth = 0
  let previous = ''
  /** After FROM, JOIN, INTO or UPDATE: the next name is a table (FROM or JOIN: unless a call follows). */
  let expecting: string | undefined
  /** A table's name read, until the next token says whether it goes on (a dot) or was a function. */
  let pending: { name: string, after: string } | undefined
  let qualifying = false
  for (const [, quoted, word, punctuation] of sql.matchAll(TOKEN)) {
    if (quoted === undefined && word === undefined && punctuation === undefined) continue
    if (pending !== undefined) {
      if (punctuation === '.') {
        qualifying = true
        continue
      }
      if (qualifying && (quoted !== undefined || word !== undefined)) {
        pending.name += `.${quoted ?? word!}`
        qualifying = false
        continue
      }
      const call = punctuation === '(' && (pending.after === 'FROM' || pending.after === 'JOIN')
      if (!call) collection = pending.name
      pending = undefined
      qualifying = false
      // A WITH that reads first may write later: read on until its end, the write would name it.
      if (collection !== undefined && operation !== undefined && !(withClause && operation === 'SELECT')) break
    }
    if (punctuation === '(') {
      queryAt[++depth] = false
      expecting = undefined
      continue
    }
    if (punctuation === ')') {
      depth = Math.max(0, depth - 1)
      continue
    }
    if (punctuation === '.') continue
    const keyword = word?.toUpperCase()
    if (expecting !== undefined && (quoted !== undefined || !NOT_TABLES.has(keyword!))) {
      pending = { name: quoted?.replaceAll('""', '"') ?? word!, after: expecting }
      expecting = undefined
      continue
    }
    if (keyword === undefined) continue
    // FOR UPDATE, FOR NO KEY UPDATE (row locks), ON CONFLICT DO UPDATE: no write of its own, no table follows.
    const updateOfRows = keyword === 'UPDATE' && (previous === 'FOR' || previous === 'KEY' || previous === 'DO')
    if (operation === undefined) {
      if (previous === '' && keyword === 'WITH') withClause = true
      else if (!withClause || DML.has(keyword)) operation = keyword
    } else if (withClause && operation === 'SELECT' && WRITES.has(keyword) && !updateOfRows) {
      // A statement that writes is named by its write (a data-modifying CTE after one that reads), and its table.
      operation = keyword
      collection = undefined
      expecting = undefined
    }
    if (keyword === 'SELECT' || keyword === 'DELETE') queryAt[depth] = true
    if (collection === undefined && BEFORE_TABLE.has(keyword)) {
      const fromOfQuery = keyword !== 'FROM' || (queryAt[depth] === true && previous !== 'DISTINCT')
      if (fromOfQuery && !updateOfRows) expecting = keyword
    }
    previous = keyword
  }
  if (pending !== undefined) collection = pending.name
  return { operation, collection }
}

function traceConnection (connection: DatabaseConnection, tracer: Tracer): void {
  const execute = connection.executeQuery.bind(connection)
  connection.executeQuery = <R>(query: CompiledQuery): Promise<QueryResult<R>> => {
    if (trace.getSpan(context.active()) === undefined) return execute<R>(query)
    const { operation, collection } = describeStatement(query.sql)
    // {operation} {table}, {operation}, or the database system when neither can be told.
    const name = [operation, collection].filter((part) => part !== undefined).join(' ') || DB_SYSTEM_NAME_VALUE_POSTGRESQL
    return tracer.startActiveSpan(name, {
      kind: SpanKind.CLIENT,
      attributes: {
        [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL,
        ...(operation !== undefined && { [ATTR_DB_OPERATION_NAME]: operation }),
        ...(collection !== undefined && { [ATTR_DB_COLLECTION_NAME]: collection }),
        [ATTR_DB_QUERY_TEXT]: query.sql
      }
    }, async (span) => {
      try {
        return await execute<R>(query)
      } catch (err) {
        const code = (err as { code?: unknown }).code
        const type = typeof code === 'string' ? code : (err as Error).constructor?.name ?? 'Error'
        span.setAttribute(ATTR_ERROR_TYPE, type)
        if (typeof code === 'string') span.setAttribute(ATTR_DB_RESPONSE_STATUS_CODE, code)
        span.setStatus({ code: SpanStatusCode.ERROR })
        throw err
      } finally {
        span.end()
      }
    })
  }
}

/** `dialect` with a span per statement, when tracing is on; `dialect` itself otherwise. */
export function withQuerySpans (dialect: Dialect, tracerProvider: TracerProvider | undefined): Dialect {
  if (tracerProvider === undefined) return dialect
  const tracer = tracerProvider.getTracer(QUERY_SPANS_SCOPE)
  return {
    createAdapter: () => dialect.createAdapter(),
    createQueryCompiler: () => dialect.createQueryCompiler(),
    createIntrospector: (db) => dialect.createIntrospector(db),
    createDriver: (): Driver => {
      const driver = dialect.createDriver()
      const traced = new WeakSet<DatabaseConnection>()
      const acquire = driver.acquireConnection.bind(driver)
      // A driver keeps its connections (one per pooled client, the thread's one) and hands the
      // same object out again: each is wrapped once, the first time it is handed out, and goes
      // on being the driver's own object (its release and transactions use it as such).
      driver.acquireConnection = async () => {
        const connection = await acquire()
        if (!traced.has(connection)) {
          traceConnection(connection, tracer)
          traced.add(connection)
        }
        return connection
      }
      return driver
    }
  }
}
