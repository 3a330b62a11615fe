// Tasks, always scoped to their owner: every query takes the user id.
import { sql, type Kysely, type QueryCreator, type RawBuilder } from 'kysely'
import type { CreateTaskBody, Task, TaskStatus, UpdateTaskBody } from '../schemas/tasks.js'
import { prepareQuery } from './statements.js'
import type { Database, TaskRow } from './types.js'

type TaskFields = Omit<TaskRow, 'user_id'>

export const toTask = (row: TaskFields): Task => ({
  id: row.id,
  title: row.title,
  description: row.description,
  status: row.status,
  dueDate: row.due_date,
  completedAt: row.completed_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at
})

// completed_at is set when a task enters `completed`, kept while it stays there,
// and cleared when it leaves.
const completedAtFor = (status: TaskStatus): RawBuilder<string | null> =>
  status === 'completed' ? sql<string>`coalesce(completed_at, now())` : sql<null>`null`

const TASK_COLUMNS = ['id', 'title', 'description', 'status', 'due_date', 'completed_at', 'created_at', 'updated_at'] as const

interface ListParams { userId: string, status?: TaskStatus, limit: number, offset: number }

export interface TaskCounts {
  /** Tasks matching the filter (all of them without one), ignoring limit and offset. */
  total: number
  /** All of the user's tasks by status, ignoring the filter. */
  todo: number
  inProgress: number
  completed: number
}

/** The user's tasks, of one status when `status` is given. */
const ownTasks = (db: QueryCreator<Database>, userId: string, status?: TaskStatus) => {
  const mine = db.selectFrom('tasks').where('user_id', '=', userId)
  return status === undefined ? mine : mine.where('status', '=', status)
}
const countWhere = (status: TaskStatus) => sql<number>`(count(*) filter (where status = ${sql.lit(status)}))::int`

/**
 * A page of tasks ends before its tasks' JSON would pass this many bytes (always holding at
 * least one task), so that one answer costs about as much as a page of ordinary tasks however
 * long their descriptions are: 1,000 tasks of 10,000-character descriptions would be 10 MB.
 * The size of a task is estimated from what is stored (taskBytes); the answer says where the
 * next page starts. Half a MiB: with one user's pages built one at a time
 * (plugins/app/user-turns.ts), 4 connections fetching such pages without pause left a /health
 * probe's p99 at 30-44 ms and another user's GET /tasks p50 at 2.3-2.8x quiet; with 1 MiB,
 * 54-95 ms and 3.6-4.7x (npm run bench -- --only=heavy.pages, PostgreSQL, quiet machine).
 * 1,000 tasks still fit in one page while title and description average under ~268 bytes.
 */
export const PAGE_BYTES = 512 * 1024
/**
 * A task's JSON beyond its title and description: the keys, id, status and four timestamps
 * (about 220 bytes at most), rounded up.
 */
export const TASK_JSON_OVERHEAD = 256
// From the stored sizes, which PostgreSQL knows without reading (or decompressing) a long
// description: UTF-8 bytes of title and description, plus the rest of the task's JSON.
// Characters that JSON escapes (quotes, backslashes, control characters) make the real
// answer larger than this estimate.
const taskBytes = sql<number>`octet_length(title) + coalesce(octet_length(description), 0) + ${sql.lit(TASK_JSON_OVERHEAD)}`

// GET /tasks in one round trip: the counts (one index-only scan of the user's tasks with
// FILTER aggregates), then the page beside them, newest first, walking an index on
// (user_id[, status], created_at desc, id desc). The counts are the outer row, so a user
// with no matching task still gets one row: the counts, with the task columns null. A
// prepared query's SQL is fixed, so the status filter makes a second statement rather
// than a branch.
//
// The page is cut to PAGE_BYTES in SQL, so the database never sends more: over the tasks of
// `limit` and `offset`, a running sum of their sizes (a window in the order of the page, so
// no second sort) keeps the tasks up to the one that reaches the budget, and always the
// first (whose running sum is its own size). Sizes are positive, so the kept tasks are the
// page's first ones.
/** The page's tasks (`limit` from `offset`, newest first), cut to PAGE_BYTES: a subquery named `page`. */
function pageOf (db: QueryCreator<Database>, p: ListParams, status: TaskStatus | undefined) {
  const newest = ownTasks(db, p.userId, status)
    .select(TASK_COLUMNS)
    .orderBy('created_at', 'desc').orderBy('id', 'desc')
    .limit(p.limit).offset(p.offset)
    .as('newest')
  const sized = db.selectFrom(newest)
    .select(TASK_COLUMNS)
    .select([
      taskBytes.as('bytes'),
      sql<number>`sum(${taskBytes}) over (order by created_at desc, id desc rows unbounded preceding)`.as('bytes_through')
    ])
    .as('sized')
  return db.selectFrom(sized)
    .select(TASK_COLUMNS)
    .where((eb) => eb.or([
      eb('bytes_through', '<=', sql.lit(PAGE_BYTES)),
      eb('bytes_through', '=', eb.ref('bytes'))
    ]))
    .as('page')
}

/** The user's task counts (the filter's among them as `total`): the CTE `counts`, one row. */
const withCounts = (db: QueryCreator<Database>, p: ListParams, status: TaskStatus | undefined) =>
  db.with('counts', (db) => ownTasks(db, p.userId).select([
    (status === undefined ? sql<number>`count(*)::int` : sql<number>`(count(*) filter (where status = ${status}))::int`).as('total'),
    countWhere('todo').as('todo'),
    countWhere('in-progress').as('in_progress'),
    countWhere('completed').as('completed')
  ]))

const pageQuery = (byStatus: boolean) => prepareQuery(byStatus ? 'tasks_page_by_status' : 'tasks_page',
  (db, p: ListParams) => {
    const status = byStatus ? p.status : undefined
    return withCounts(db, p, status)
      .selectFrom('counts')
      .leftJoinLateral(pageOf(db, p, status), (join) => join.onTrue())
      .select(['counts.total', 'counts.todo', 'counts.in_progress', 'counts.completed'])
      .select(TASK_COLUMNS.map((column) => `page.${column}` as const))
      .orderBy('page.created_at', 'desc').orderBy('page.id', 'desc')
  })
/** The statements GET /tasks runs: without a status filter and with one. */
export const tasksPage = { all: pageQuery(false), byStatus: pageQuery(true) }

/**
 * A timestamptz as the API writes it, rendered by PostgreSQL: 2026-11-23T05:08:02.519Z, the
 * form timestamptzToIso (db/engine/timestamps.ts) gives every other answer. to_char's MS
 * truncates to milliseconds, as that does; `at time zone 'UTC'` whatever the session's zone.
 * NULL stays NULL.
 */
const isoTime = (column: string) =>
  sql<string | null>`to_char(${sql.ref(column)} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

// The same page, rendered by PostgreSQL as the text of the answer's `data` array (issue 34),
// for a server of its own: the process passes those bytes on instead of decoding 8 columns of
// every row into an object and serializing it again. One row: the counts, the page's size and
// its text (none for an empty page). Each task is row_to_json of a row whose column names are
// the Task schema's keys, in its order (schemas/tasks.ts): compact JSON, escaped as
// JSON.stringify escapes the same strings; string_agg's own ORDER BY keeps the page's order.
// Not on the embedded database, where PostgreSQL runs in WebAssembly in the service's own
// process and renders JSON more slowly than the rows cost (bench/README.md, issue 34): the
// route picks (routes/tasks/index.ts), and test/tasks/tasks.test.ts holds both to the same bytes.
const renderedPageQuery = (byStatus: boolean) => prepareQuery(byStatus ? 'tasks_page_json_by_status' : 'tasks_page_json',
  (db, p: ListParams) => {
    const status = byStatus ? p.status : undefined
    const rendered = db.selectFrom(pageOf(db, p, status))
      .innerJoinLateral(db.selectNoFrom([
        sql.ref<number>('page.id').as('id'),
        sql.ref<string>('page.title').as('title'),
        sql.ref<string | null>('page.description').as('description'),
        sql.ref<TaskStatus>('page.status').as('status'),
        isoTime('page.due_date').as('dueDate'),
        isoTime('page.completed_at').as('completedAt'),
        isoTime('page.created_at').as('createdAt'),
        isoTime('page.updated_at').as('updatedAt')
      ]).as('task'), (join) => join.onTrue())
      .select([
        sql<number>`count(*)::int`.as('size'),
        sql<string | null>`string_agg(row_to_json(task)::text, ',' order by page.created_at desc, page.id desc)`.as('data')
      ])
      .as('rendered')
    return withCounts(db, p, status)
      .selectFrom('counts')
      .crossJoin(rendered)
      .select(['counts.total', 'counts.todo', 'counts.in_progress', 'counts.completed', 'rendered.size', 'rendered.data'])
  })
/** The rendered statements, on a PostgreSQL server. */
export const tasksPageJson = { all: renderedPageQuery(false), byStatus: renderedPageQuery(true) }

export interface TaskPage {
  tasks: Task[]
  counts: TaskCounts
  /** Where the next page starts, when tasks matching the filter come after this page. */
  nextOffset?: number
}

export async function listTasks (
  db: Kysely<Database>,
  userId: string,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<TaskPage> {
  // The schema's defaults fill these in; the fallbacks keep the function safe on its own.
  const params: ListParams = { userId, status: query.status, limit: query.limit ?? 1000, offset: query.offset ?? 0 }
  const rows = await tasksPage[query.status === undefined ? 'all' : 'byStatus'].run(db, params)
  const first = rows[0]!
  const counts = { total: first.total, todo: first.todo, inProgress: first.in_progress, completed: first.completed }
  // No task on the page: the one row carries only the counts.
  if (first.id === null) return { tasks: [], counts }
  // The counts and the page come from one statement, so they agree: more tasks match than
  // this page reaches when it ended before them (at `limit`, or at PAGE_BYTES).
  const next = params.offset + rows.length
  return { tasks: rows.map((row) => toTask(row as TaskFields)), counts, ...(next < counts.total && { nextOffset: next }) }
}

/** A page as PostgreSQL rendered it: `data` is the JSON text of the page's array of Task. */
export interface RenderedTaskPage {
  data: string
  counts: TaskCounts
  nextOffset?: number
}

/** listTasks, with the page rendered by PostgreSQL (tasksPageJson): for a server of its own, not the embedded engine. */
export async function listTasksRendered (
  db: Kysely<Database>,
  userId: string,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<RenderedTaskPage> {
  const params: ListParams = { userId, status: query.status, limit: query.limit ?? 1000, offset: query.offset ?? 0 }
  const [row] = await tasksPageJson[query.status === undefined ? 'all' : 'byStatus'].run(db, params)
  const { total, todo, in_progress: inProgress, completed, size, data } = row!
  const counts = { total, todo, inProgress, completed }
  // No task on the page: no text (string_agg over no row).
  if (size === 0) return { data: '[]', counts }
  const next = params.offset + size
  return { data: `[${data!}]`, counts, ...(next < total && { nextOffset: next }) }
}

export async function findTaskForUser (db: Kysely<Database>, userId: string, id: number): Promise<Task | undefined> {
  const row = await db.selectFrom('tasks').selectAll()
    .where('id', '=', id).where('user_id', '=', userId)
    .executeTakeFirst()
  return row && toTask(row)
}

interface CreateParams {
  userId: string
  title: string
  description: string | null
  status: TaskStatus
  dueDate: string | null
}

// POST /tasks in one round trip: the task and its `task_created` usage event are written by
// one statement (a data-modifying CTE), so both are written or neither, with no BEGIN and
// COMMIT around them. PostgreSQL runs the `event` insert to completion although the outer
// select never reads it.
export const createTaskStatement = prepareQuery('tasks_create', (db, p: CreateParams) => db
  .with('task', (db) => db.insertInto('tasks')
    .values({
      user_id: p.userId,
      title: p.title,
      description: p.description,
      status: p.status,
      due_date: p.dueDate,
      completed_at: sql<string | null>`case when ${p.status}::task_status = 'completed' then now() end`
    })
    .returning(['user_id', ...TASK_COLUMNS]))
  .with('event', (db) => db.insertInto('usage_events')
    .columns(['user_id', 'name', 'properties'])
    .expression((eb) => eb.selectFrom('task').select([
      'task.user_id',
      sql.lit('task_created').as('name'),
      sql<string>`jsonb_build_object('userId', task.user_id, 'taskId', task.id)`.as('properties')
    ])))
  .selectFrom('task')
  .select(TASK_COLUMNS))

/** Creates the task and records its `task_created` usage event, in one statement. */
export async function createTask (db: Kysely<Database>, userId: string, body: CreateTaskBody): Promise<Task> {
  const [row] = await createTaskStatement.run(db, {
    userId,
    title: body.title.trim(),
    description: body.description ?? null,
    status: body.status ?? 'todo',
    dueDate: body.dueDate ?? null
  })
  return toTask(row!)
}

/** Applies the given fields; `undefined` leaves a field as it is. Undefined result: no such task for this user. */
export async function updateTaskForUser (
  db: Kysely<Database>,
  userId: string,
  id: number,
  changes: UpdateTaskBody
): Promise<Task | undefined> {
  const row = await db.updateTable('tasks')
    .set({
      ...(changes.title !== undefined && { title: changes.title.trim() }),
      ...(changes.description !== undefined && { description: changes.description }),
      ...(changes.dueDate !== undefined && { due_date: changes.dueDate }),
      ...(changes.status !== undefined && { status: changes.status, completed_at: completedAtFor(changes.status) }),
      updated_at: sql`now()`
    })
    .where('id', '=', id).where('user_id', '=', userId)
    .returningAll()
    .executeTakeFirst()
  return row && toTask(row)
}

/** PUT semantics: every field is replaced; omitted optional fields become null / `todo`. */
export function replaceTaskForUser (db: Kysely<Database>, userId: string, id: number, body: CreateTaskBody): Promise<Task | undefined> {
  return updateTaskForUser(db, userId, id, {
    title: body.title,
    description: body.description ?? null,
    status: body.status ?? 'todo',
    dueDate: body.dueDate ?? null
  })
}

export async function deleteTaskForUser (db: Kysely<Database>, userId: string, id: number): Promise<boolean> {
  const result = await db.deleteFrom('tasks').where('id', '=', id).where('user_id', '=', userId).executeTakeFirst()
  return result.numDeletedRows > 0n
}
