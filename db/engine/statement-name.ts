// A prepared query's statement name travels in its own text, as a leading comment
// PostgreSQL ignores (db/engine/prepared.ts writes it): the pg client (db/engine/connect.ts) and the
// embedded database's thread (db/engine/pglite.worker.ts) read it from the query they are handed
// and run a named statement, parsed and planned once per session. Nothing is registered
// anywhere, and a driver that copies or rewraps the parameters passes the text through.
const NAME_PREFIX = '/*statement:'

/** `sql` carrying the statement name `name`. */
export const namedText = (name: string, sql: string): string => `${NAME_PREFIX}${name}*/ ${sql}`

/** The statement name a query's text carries, if it is a prepared query's. */
export function statementName (sql: string): string | undefined {
  if (!sql.startsWith(NAME_PREFIX)) return undefined
  const end = sql.indexOf('*/', NAME_PREFIX.length)
  return end === -1 ? undefined : sql.slice(NAME_PREFIX.length, end)
}
