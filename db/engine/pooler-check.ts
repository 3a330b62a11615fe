// Start-up checks of the way to PostgreSQL, for what a pooler in between can break: the
// statement timeout and named prepared statements. PgBouncer in transaction mode refuses the
// statement_timeout start-up parameter (stock) or drops it without a word
// (ignore_startup_parameters), and before 1.21 loses named statements between transactions,
// so every other request would fail with `prepared statement … does not exist`. Each check
// asks the server what it actually applies, and a mismatch stops start-up with one line
// saying what to set (DatabaseSetupError): a misconfiguration is cheaper to meet at deploy time
// than as 500s under load. The checks use connections of their own, closed afterwards.
import { randomBytes } from 'node:crypto'
import type Pg from 'pg'
import pg from './pg.js'
import { StartRefusal } from '../../errors.js'

/** The way to PostgreSQL breaks something the service relies on: start-up stops with this one line. */
export class DatabaseSetupError extends StartRefusal {
  override name = 'DatabaseSetupError'
}

export type DatabasePooler = 'none' | 'transaction'

export interface SessionCheckOptions {
  pooler: DatabasePooler
  statementTimeoutMs: number
  preparedStatements: boolean
}

const DOCS = 'docs/operations.md, "PgBouncer"'

/**
 * Connects as the pool does (`client`: its connection settings) and checks that the statement
 * timeout holds on the server and, when the service runs named statements, that they survive
 * from one transaction to the next. Throws DatabaseSetupError when they do not; any other error
 * (an unreachable server) as it came.
 */
export async function checkDatabaseSessions (client: Pg.ClientConfig, options: SessionCheckOptions): Promise<void> {
  const a = await connect(client)
  try {
    await checkStatementTimeout(a, options)
    if (!options.preparedStatements) return
    const b = await connect(client)
    try {
      if (await namedStatementsAcrossTransactions(a, b) === 'lost') {
        const pooler = options.pooler === 'none' ? ' DATABASE_POOLER=transaction and' : ''
        throw new DatabaseSetupError(`Database: named prepared statements do not survive from one transaction to the next on these connections (a pooler in transaction mode, such as PgBouncer before 1.21 or without max_prepared_statements): set${pooler} DATABASE_PREPARED_STATEMENTS=false (${DOCS})`)
      }
    } finally {
      await b.end().catch(() => {})
    }
  } finally {
    await a.end().catch(() => {})
  }
}

async function connect (config: Pg.ClientConfig): Promise<Pg.Client> {
  const client = new pg.Client(config)
  // An error event with no listener would crash the process (a server that goes away).
  client.on('error', () => {})
  try {
    await client.connect()
  } catch (err) {
    await client.end().catch(() => {})
    // PgBouncer's words for a start-up parameter it does not track (it answers no SQLSTATE of its own).
    if (/unsupported startup parameter/i.test((err as Error).message)) {
      throw new DatabaseSetupError(`Database: the server refused a start-up parameter ("${(err as Error).message}"), as PgBouncer does with statement_timeout: behind a pooler in transaction mode set DATABASE_POOLER=transaction and the statement timeout on the role or database (${DOCS})`)
    }
    throw err
  }
  return client
}

async function checkStatementTimeout (client: Pg.Client, options: SessionCheckOptions): Promise<void> {
  const { rows: [row] } = await client.query<{ ms: string, role: string, database: string }>(
    "select setting as ms, current_user as role, current_database() as database from pg_settings where name = 'statement_timeout'")
  const applied = Number(row!.ms)
  const wanted = options.statementTimeoutMs
  const set = `ALTER ROLE ${quoteIdent(row!.role)} SET statement_timeout = ${wanted} (or ALTER DATABASE ${quoteIdent(row!.database)} SET …, or PgBouncer's connect_query)`
  const shown = applied === 0 ? '0 (none)' : `${applied} ms`
  if (options.pooler === 'none') {
    if (applied === wanted) return
    throw new DatabaseSetupError(`Database: statement_timeout on the server is ${shown}, not the ${wanted} ms the service sent when connecting: something between the service and PostgreSQL drops start-up parameters (PgBouncer's ignore_startup_parameters). Behind a pooler in transaction mode set DATABASE_POOLER=transaction and ${set} (${DOCS})`)
  }
  // A pooler hands the service server sessions it opened itself: the timeout must be theirs
  // from the start. Shorter than DATABASE_STATEMENT_TIMEOUT_MS is stricter and allowed; none,
  // or longer (the client's query timeout would give up first and discard the connection), is not.
  if (applied > 0 && applied <= wanted) return
  throw new DatabaseSetupError(`Database: with DATABASE_POOLER=transaction the statement timeout must be set on the server sessions, and statement_timeout there is ${shown}${applied > wanted ? `, longer than DATABASE_STATEMENT_TIMEOUT_MS (${wanted})` : ''}: ${set} (${DOCS})`)
}

const PROBE_ROUNDS = 3

/**
 * Whether a named statement prepared by `b` is still there in b's next transaction. A pooler
 * in transaction mode gives each transaction whichever server session is free: `a` holds one
 * in an open transaction (PgBouncer hands out the one b just released), so b's next statement
 * runs on another. If b's statement fails there as unknown, named statements are lost between
 * transactions; if it runs on another session, the pooler carries them (PgBouncer 1.21+ with
 * max_prepared_statements). If b kept its session every round, sessions are kept: PostgreSQL
 * itself, or a pooler in session mode.
 */
async function namedStatementsAcrossTransactions (a: Pg.Client, b: Pg.Client): Promise<'kept' | 'lost'> {
  for (let round = 0; round < PROBE_ROUNDS; round++) {
    const statement = { name: `pooler_probe_${randomBytes(6).toString('hex')}`, text: 'select pg_backend_pid() as pid' }
    const before = await backendPid(b, statement)
    await a.query('begin')
    try {
      const held = await backendPid(a, { text: statement.text })
      let after: number
      try {
        after = await backendPid(b, statement)
      } catch (err) {
        if ((err as { code?: string }).code === '26000') return 'lost'
        throw err
      }
      if (held === before || after !== before) return 'kept'
    } finally {
      await a.query('rollback')
    }
  }
  return 'kept'
}

async function backendPid (client: Pg.Client, query: { name?: string, text: string }): Promise<number> {
  const { rows: [row] } = await client.query<{ pid: number }>(query)
  return row!.pid
}

const quoteIdent = (name: string): string => /^[a-z_][a-z0-9_]*$/.test(name) ? name : `"${name.replaceAll('"', '""')}"`
