// The only place in bench/ that reads the service's prepared statements: the database
// ceiling runs GET /tasks's statements and the growth series explains one, with the
// service's own SQL (each statement carries its name in its text; db/engine/prepared.ts).
import type { PreparedStatement } from '../db/statements.js'
import { tasksPageJson, tasksPageJsonForToken } from '../db/tasks.js'
import { userForToken } from '../db/users.js'

export type Statement = Readonly<PreparedStatement>

const statements = new Map<string, Statement>([tasksPageJson.all, tasksPageJson.byStatus, tasksPageJsonForToken.all, tasksPageJsonForToken.byStatus, userForToken].map((s) => [s.name, s]))

/** The service's prepared statement `name`: its SQL and the named parameter of each $n. */
export function statement (name: string): Statement {
  const found = statements.get(name)
  if (found === undefined) throw new Error(`no prepared statement ${name}`)
  return found
}
