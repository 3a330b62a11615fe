// Hot queries are built once instead of on every request. Kysely builds and compiles the
// SQL at start-up with a marker in place of each value; each call only puts its values in.
// On PostgreSQL the text also runs as a named statement (db/engine/connect.ts), which the server
// parses and plans once per connection; the name is part of the text. Only queries whose SQL never changes shape belong
// here; they name their columns rather than select *, so a column added by a later
// migration cannot change a prepared statement's result type under a running instance.
// They run as compiled here: a Kysely plugin added to the database instance later would
// not rewrite them.
import {
  DummyDriver, Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, type Compilable
} from 'kysely'
import { namedText } from './statement-name.js'

/** Compiles, never connects: PostgreSQL and PGlite share this SQL. */
const compiler = new Kysely<unknown>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new PostgresIntrospector(db),
    createQueryCompiler: () => new PostgresQueryCompiler()
  }
})

class Marker {
  constructor (readonly key: string) {}
}

/** A hot query compiled once: its name, its SQL (which names it) and the parameter of each $n. */
export interface PreparedStatement {
  name: string
  sql: string
  /** The parameter each $n stands for, in order. */
  params: string[]
}

export interface PreparedQuery<DB, P, R> extends PreparedStatement {
  run: (db: Kysely<DB>, params: P) => Promise<R[]>
}

/**
 * `build` receives the compile-only Kysely and a stand-in for `params` whose every field
 * is a marker; every value in the query must come from `params`.
 */
export function prepareQuery<DB, P extends object, R> (
  name: string,
  build: (db: Kysely<DB>, params: P) => Compilable<R>
): PreparedQuery<DB, P, R> {
  if (!/^[a-z][a-z0-9_]*$/.test(name)) throw new Error(`prepared query ${name}: a name is lower-case letters, digits and _`)
  const markers = new Proxy({}, { get: (_target, key) => new Marker(String(key)) }) as P
  const compiled = build(compiler as Kysely<DB>, markers).compile()
  const slots = compiled.parameters.map((value) => {
    if (!(value instanceof Marker)) throw new Error(`prepared query ${name}: the value ${String(value)} is not a parameter`)
    return value.key as keyof P
  })
  const sql = namedText(name, compiled.sql)
  const named = { ...compiled, sql }
  return {
    name,
    sql,
    params: slots.map(String),
    run: async (db, params) => {
      const { rows } = await db.executeQuery<R>({ ...named, parameters: slots.map((slot) => params[slot]) })
      return rows
    }
  }
}

/** prepareQuery with the schema fixed, so a repository's builder is typed by its tables (db/statements.ts). */
export function queryPreparer<DB> () {
  return <P extends object, R>(name: string, build: (db: Kysely<DB>, params: P) => Compilable<R>): PreparedQuery<DB, P, R> =>
    prepareQuery(name, build)
}
