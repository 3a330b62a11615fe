// The only place in bench/ that reads the service's prepared statements (db/prepared.ts):
// the database ceiling runs GET /tasks's statements and the growth series explains one, with
// the service's own SQL. The registry fills as the repositories are imported, hence the two
// imports for their side effect; when it changes, only this file does.
import '../db/tasks.js'
import '../db/users.js'
import { preparedStatements } from '../db/prepared.js'

export interface Statement {
  readonly name: string
  readonly sql: string
  /** The parameter each $n stands for, in order. */
  readonly params: readonly string[]
}

const statements = preparedStatements()

/** The service's prepared statement `name`: its SQL and the named parameter of each $n. */
export function statement (name: string): Statement {
  const found = statements.get(name)
  if (found === undefined) throw new Error(`no prepared statement ${name}`)
  return found
}
