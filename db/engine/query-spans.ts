// A client span around every statement the service sends, on either database (the pg pool or
// the embedded thread): one wrapper around the driver's connections instead of an
// instrumentation per driver (OpenTelemetry's pg instrumentation hooks `require`, which an ESM
// service does not go through, and knows nothing of PGlite). Used only when tracing is on
// (plugins/tracing.ts); otherwise the dialect runs as it is.
//
// Only statements run for something already traced (a request) get a span: migrations and the
// background pollers' statements would each be a trace of one span, every few seconds.
//
// A span carries the statement's text as compiled, with its $1… placeholders: the values,
// which hold users' data, are never recorded, nor an error's message (it may quote them), only
// its SQLSTATE code.
import { context, SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api'
import {
  ATTR_DB_OPERATION_NAME, ATTR_DB_QUERY_TEXT, ATTR_DB_RESPONSE_STATUS_CODE, ATTR_DB_SYSTEM_NAME, ATTR_ERROR_TYPE,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL
} from '@opentelemetry/semantic-conventions'
import type { CompiledQuery, DatabaseConnection, Dialect, Driver, QueryResult } from 'kysely'

/** The statement's first keyword (SELECT, INSERT, WITH, BEGIN …), which names its span. */
export function operationName (sql: string): string {
  const match = /^\s*([a-z]+)/i.exec(sql)
  return match === null ? 'query' : match[1]!.toUpperCase()
}

function traceConnection (connection: DatabaseConnection, tracer: Tracer): void {
  const execute = connection.executeQuery.bind(connection)
  connection.executeQuery = <R>(query: CompiledQuery): Promise<QueryResult<R>> => {
    if (trace.getSpan(context.active()) === undefined) return execute<R>(query)
    const operation = operationName(query.sql)
    return tracer.startActiveSpan(operation, {
      kind: SpanKind.CLIENT,
      attributes: {
        [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL,
        [ATTR_DB_OPERATION_NAME]: operation,
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

/** `dialect` with a span per statement, when there is a tracer; `dialect` itself otherwise. */
export function withQuerySpans (dialect: Dialect, tracer: Tracer | undefined): Dialect {
  if (tracer === undefined) return dialect
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
