// Seeding straight into the database, in bulk: users (one bcrypt hash computed once and
// shared), preferences, tasks, and the growth series' table sizes. The service creates the
// schema itself at start-up; these run after it has.
import { resolve } from 'node:path'
import pg from 'pg'
import { statement as preparedStatement } from './statements.js'

export interface Sql {
  query: <R extends object = Record<string, unknown>>(text: string, params?: unknown[]) => Promise<R[]>
  close: () => Promise<void>
}

export async function openPostgres (url: string): Promise<Sql> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return {
    query: async <R extends object>(text: string, params: unknown[] = []) => (await client.query(text, params)).rows as R[],
    close: () => client.end()
  }
}

/** The embedded database's files, opened in this process (the service must be stopped). */
export async function openPglite (dataDir: string): Promise<Sql> {
  const { PGlite } = await import('@electric-sql/pglite')
  const db = await PGlite.create(resolve(dataDir, 'pglite'))
  return {
    query: async <R extends object>(text: string, params: unknown[] = []) => (await db.query<R>(text, params)).rows,
    close: () => db.close()
  }
}

export const PASSWORD = 'bench-password-123'
export const emailOf = (n: number): string => `user${n}@bench.test`
/** Ids as the service makes them (UUIDs), deterministic so SQL and the bench agree. */
const idSql = (expr: string) => `md5('bench-user-' || ${expr})::uuid::text`
export const customerIdOf = (n: number): string => `cus_bench_${n}`
export const subscriptionIdOf = (n: number): string => `sub_bench_${n}`
export const PRICE_ID = 'price_pro_monthly'

/**
 * Users of the growth series (one with a page of tasks, one with 10, one with 10,000), and
 * the heavy-pages user (1,000 tasks with 10,000-character descriptions).
 */
export const SPECIAL = {
  growth: 'growth@bench.test',
  small: 'small@bench.test',
  large: 'large@bench.test',
  heavy: 'heavy@bench.test'
} as const

/** Tasks of the growth user, whose GET /tasks the growth series follows. */
export const GROWTH_USER_TASKS = 50

export interface SeedPlan {
  users: number
  tasksPerUser: number
  /** user1…userN are customers with an active subscription (webhook targets). */
  customers: number
  passwordHash: string
}

const TASK_COLUMNS = 'user_id, title, description, status, due_date, completed_at, created_at, updated_at'
/** Task values for row number `t` (an SQL expression), owned by `owner` (an SQL expression). */
const taskValues = (owner: string, t: string) => `${owner},
  'Task ' || ${t} || ': prepare the weekly report',
  case when ${t} % 2 = 0 then 'Gather the figures, draft the summary, review it with the team and send it out. Ref ' || ${t} end,
  (array['todo','in-progress','completed'])[1 + ${t} % 3]::task_status,
  case when ${t} % 4 = 0 then now() + ${t} % 90 * interval '1 day' end,
  case when ${t} % 3 = 2 then now() - ${t} % 1000 * interval '1 minute' end,
  now() - ${t} * interval '1 second',
  now() - ${t} * interval '1 second'`

export async function seed (sql: Sql, plan: SeedPlan): Promise<void> {
  await sql.query(`insert into users (id, name, email, password, email_verified, created_at, updated_at)
    select ${idSql('g')}, 'Bench User ' || g, 'user' || g || '@bench.test', $1, now(), now() - g * interval '1 minute', now()
    from generate_series(1, $2::int) g`, [plan.passwordHash, plan.users])
  for (const [key, email] of Object.entries(SPECIAL)) {
    await sql.query(`insert into users (id, name, email, password) values (${idSql('$1')}, $2, $3, $4)`, [key, `Bench ${key}`, email, plan.passwordHash])
  }
  await sql.query(`insert into user_preferences (user_id, theme, plan, payment_customer_id, payment_subscription_id,
      payment_subscription_status, payment_price_id, payment_current_period_end, payment_state_at)
    select ${idSql('g')}, (array['system','light','dark'])[1 + g % 3],
      case when g <= $2 then 'pro' else 'free' end,
      case when g <= $2 then 'cus_bench_' || g end,
      case when g <= $2 then 'sub_bench_' || g end,
      case when g <= $2 then 'active' end,
      case when g <= $2 then '${PRICE_ID}' end,
      case when g <= $2 then now() + interval '20 days' end,
      case when g <= $2 then now() - interval '10 days' end
    from generate_series(1, $1::int) g`, [plan.users, plan.customers])
  await sql.query('insert into user_preferences (user_id) select id from users where email like \'%@bench.test\' and email not like \'user%\'')
  // Interleaved by user, as tasks created over time by many users would be.
  await sql.query(`insert into tasks (${TASK_COLUMNS})
    select ${taskValues(idSql('u'), '(t * $1 + u)')}
    from generate_series(1, $2::int) t, generate_series(1, $1::int) u`, [plan.users, plan.tasksPerUser])
  await analyze(sql)
}

export async function analyze (sql: Sql): Promise<void> {
  // Statistics and the visibility map (index-only counts), as autovacuum would leave them.
  await sql.query('vacuum analyze users')
  await sql.query('vacuum analyze user_preferences')
  await sql.query('vacuum analyze tasks')
}

export async function userIds (sql: Sql, emails: string[]): Promise<Map<string, string>> {
  const rows = await sql.query<{ id: string, email: string }>('select id, email from users where email = any($1::text[])', [`{${emails.join(',')}}`])
  return new Map(rows.map((row) => [row.email, row.id]))
}

/** One task id per user, for PATCH /tasks/{id}. */
export async function taskIdsOf (sql: Sql, userId: string, limit: number): Promise<number[]> {
  const rows = await sql.query<{ id: number }>('select id from tasks where user_id = $1 order by id limit $2', [userId, limit])
  return rows.map((row) => Number(row.id))
}

export async function countTasks (sql: Sql): Promise<number> {
  const [row] = await sql.query<{ n: number }>('select count(*)::int as n from tasks')
  return Number(row?.n ?? 0)
}

export async function clearTasks (sql: Sql): Promise<void> {
  await sql.query('truncate tasks')
}

/**
 * Adds `total` tasks spread over the numbered users; every `total / ownCount`-th row
 * belongs to `email` instead (so that user's tasks are spread through the table).
 */
export async function addTasks (sql: Sql, total: number, users: number, own?: { email: string, count: number }): Promise<void> {
  const step = own ? Math.max(1, Math.floor(total / own.count)) : 0
  const ownCount = own?.count ?? 0
  const offset = await countTasks(sql)
  const CHUNK = 250_000
  for (let start = 1; start <= total; start += CHUNK) {
    const end = Math.min(total, start + CHUNK - 1)
    await sql.query(`insert into tasks (${TASK_COLUMNS})
      select ${taskValues(`case when g % nullif($3::int, 0) = 0 and g / nullif($3::int, 0) <= $4::int
          then (select id from users where email = $5) else ${idSql('(1 + g % $2::int)')} end`, `(g + ${offset})`)}
      from generate_series($1::int, $6::int) g`, [start, users, step, ownCount, own?.email ?? '', end])
  }
}

/** `count` tasks for one user, in one block. */
export async function addUserTasks (sql: Sql, email: string, count: number): Promise<void> {
  const offset = await countTasks(sql)
  await sql.query(`insert into tasks (${TASK_COLUMNS})
    select ${taskValues('(select id from users where email = $1)', `(g + ${offset})`)}
    from generate_series(1, $2::int) g`, [email, count])
}

/**
 * EXPLAIN ANALYZE of the statement GET /tasks runs for this user (its page with the counts),
 * prepared from the service's own SQL and planned generically, as a long-lived connection
 * ends up running it.
 */
export async function explainList (sql: Sql, userId: string): Promise<string> {
  const statement = preparedStatement('tasks_page_json')
  const literal = `'${userId.replace(/'/g, "''")}'`
  const values: Record<string, string> = { userId: literal, limit: '1000', offset: '0' }
  await sql.query(`prepare bench_tasks_page as ${statement.sql}`)
  await sql.query('set plan_cache_mode = force_generic_plan')
  try {
    const rows = await sql.query<Record<string, string>>(`explain (analyze, buffers, costs off) execute bench_tasks_page(${statement.params.map((param) => values[param]).join(', ')})`)
    return [`-- ${statement.sql}`, ...rows.map((row) => Object.values(row)[0])].join('\n')
  } finally {
    await sql.query('reset plan_cache_mode')
    await sql.query('deallocate bench_tasks_page')
  }
}

/**
 * `count` tasks for one user, each with a description of `length` characters: hex from md5 of
 * random values, which PostgreSQL's TOAST compression barely shrinks, as typed text would not.
 */
export async function addHeavyTasks (sql: Sql, email: string, count: number, length: number): Promise<void> {
  await sql.query(`insert into tasks (${TASK_COLUMNS})
    select (select id from users where email = $1), 'Heavy task ' || g,
      (select left(string_agg(md5(random()::text || g || i), ''), $3::int) from generate_series(1, ($3::int + 31) / 32) i),
      'todo', null, null, now() - g * interval '1 second', now() - g * interval '1 second'
    from generate_series(1, $2::int) g`, [email, count, length])
}
