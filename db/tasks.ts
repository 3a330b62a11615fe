// Tasks, always scoped to their owner: every query takes the user id.
import { sql, type Kysely, type QueryCreator, type RawBuilder } from 'kysely'
import type { CreateTaskBody, Task, TaskStatus, UpdateTaskBody } from '../schemas/tasks.js'
import { prepareQuery } from './statements.js'
import type { Database, TaskRow } from './types.js'
import { keyHolder, type KeyAsk, type KeyHolderRow } from './api-keys.js'
import { tokenHolder, tokenHolds, type TokenAsk, type WithHolder } from './users.js'

type TaskFields = Omit<TaskRow, 'user_id' | 'answer'>

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
 * The answer says where the next page starts. Half a MiB: with one user's pages built one at a
 * time (plugins/app/user-turns.ts), 4 connections fetching such pages without pause left a
 * /health probe's p99 at 30-44 ms and another user's GET /tasks p50 at 2.3-2.8x quiet; with
 * 1 MiB, 54-95 ms and 3.6-4.7x (npm run bench -- --only=heavy.pages, PostgreSQL, quiet
 * machine). 1,000 tasks still fit in one page while their JSON averages under ~524 bytes.
 */
export const PAGE_BYTES = 512 * 1024

// GET /tasks in one round trip: the counts (one index-only scan of the user's tasks with
// FILTER aggregates), and beside them the page, newest first, walking an index on
// (user_id[, status], created_at desc, id desc), as the text of the answer's `data` array.
// That text is joined from each task's stored answer (`tasks.answer`: its JSON as the API
// writes it, which PostgreSQL computes whenever the row is written; migration
// 2026-11-29T06-00-00_task-answers): the process passes those bytes on instead of decoding 8
// columns of every row into an object and serializing it again, and the database joins texts
// instead of rendering them on every read (bench/README.md, issues 30 and 34).
// test/tasks/tasks.test.ts holds the page to GET /tasks/:id's answers, to the byte. A prepared
// query's SQL is fixed, so the status filter makes a second statement rather than a branch.
//
// The page is cut to PAGE_BYTES in SQL, so the database never sends more: over the tasks of
// `limit` and `offset`, a running sum of their sizes (a window in the order of the page, so
// no second sort) keeps the tasks up to the one that reaches the budget, and always the
// first (whose running sum is its own size). Sizes are positive, so the kept tasks are the
// page's first ones. A task's size is its answer's bytes and the comma after it, which
// PostgreSQL knows without reading (or decompressing) a long answer; within PAGE_BYTES - 1,
// the page's text with its brackets stays within PAGE_BYTES.
const answerBytes = sql<number>`octet_length(answer) + 1`
const PAGE_COLUMNS = ['id', 'created_at', 'answer'] as const
/** The page's tasks (`limit` from `offset`, newest first), cut to PAGE_BYTES: a subquery named `page`. */
function pageOf (db: QueryCreator<Database>, p: ListParams, status: TaskStatus | undefined) {
  const newest = ownTasks(db, p.userId, status)
    .select(PAGE_COLUMNS)
    .orderBy('created_at', 'desc').orderBy('id', 'desc')
    .limit(p.limit).offset(p.offset)
    .as('newest')
  const sized = db.selectFrom(newest)
    .select(PAGE_COLUMNS)
    .select([
      answerBytes.as('bytes'),
      sql<number>`sum(${answerBytes}) over (order by created_at desc, id desc rows unbounded preceding)`.as('bytes_through')
    ])
    .as('sized')
  return db.selectFrom(sized)
    .select(PAGE_COLUMNS)
    .where((eb) => eb.or([
      eb('bytes_through', '<=', sql.lit(PAGE_BYTES - 1)),
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

/** The page joined (`rendered`: its size, and its text, none for an empty page), as a subquery; string_agg's own ORDER BY keeps the page's order. */
function renderedPage (db: QueryCreator<Database>, p: ListParams, status: TaskStatus | undefined) {
  return db.selectFrom(pageOf(db, p, status))
    .select([
      sql<number>`count(*)::int`.as('size'),
      sql<string | null>`string_agg(page.answer, ',' order by page.created_at desc, page.id desc)`.as('data')
    ])
    .as('rendered')
}
const RENDERED_COLUMNS = ['counts.total', 'counts.todo', 'counts.in_progress', 'counts.completed', 'rendered.size', 'rendered.data'] as const

const renderedPageQuery = (byStatus: boolean) => prepareQuery(byStatus ? 'tasks_page_json_by_status' : 'tasks_page_json',
  (db, p: ListParams) => {
    const status = byStatus ? p.status : undefined
    return withCounts(db, p, status)
      .selectFrom('counts')
      .crossJoin(renderedPage(db, p, status))
      .select(RENDERED_COLUMNS)
  })
// The same with the token's check (plugins/app/authenticate.ts, `tokenInStatement`): the
// holder's row beside the page, in the one round trip, and the page only for a token that
// holds (db/users.ts, tokenHolds): no row otherwise.
const renderedPageForTokenQuery = (byStatus: boolean) => prepareQuery(byStatus ? 'tasks_page_json_by_status_for_token' : 'tasks_page_json_for_token',
  (db, p: ListParams & TokenAsk) => {
    const status = byStatus ? p.status : undefined
    return withCounts(db, p, status)
      .with('holder', (db) => tokenHolder(db, p))
      .selectFrom('holder')
      .crossJoin('counts')
      .crossJoin(renderedPage(db, p, status))
      .selectAll('holder')
      .select(RENDERED_COLUMNS)
      .where(tokenHolds(p.iat))
  })
// The same with an API key's check (`keyInStatement`): the key's holder (db/api-keys.ts,
// keyHolder) beside the page; no row when the key does not live.
const renderedPageForKeyQuery = (byStatus: boolean) => prepareQuery(byStatus ? 'tasks_page_json_by_status_for_key' : 'tasks_page_json_for_key',
  (db, p: ListParams & KeyAsk) => {
    const status = byStatus ? p.status : undefined
    return withCounts(db, p, status)
      .with('holder', (db) => keyHolder(db, p))
      .selectFrom('holder')
      .crossJoin('counts')
      .crossJoin(renderedPage(db, p, status))
      .selectAll('holder')
      .select(RENDERED_COLUMNS)
  })
/** The statements GET /tasks runs: without a status filter and with one. */
export const tasksPageJson = { all: renderedPageQuery(false), byStatus: renderedPageQuery(true) }
/** The same, reading the token's holder too (`tokenInStatement`). */
export const tasksPageJsonForToken = { all: renderedPageForTokenQuery(false), byStatus: renderedPageForTokenQuery(true) }
/** The same, reading an API key's holder (`keyInStatement`). */
export const tasksPageJsonForKey = { all: renderedPageForKeyQuery(false), byStatus: renderedPageForKeyQuery(true) }

/** A page as PostgreSQL joined it: `data` is the JSON text of the page's array of Task. */
export interface RenderedTaskPage {
  data: string
  counts: TaskCounts
  nextOffset?: number
}

/** A page of the user's tasks (tasksPageJson). */
export async function listTasks (
  db: Kysely<Database>,
  userId: string,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<RenderedTaskPage> {
  const params = listParams(userId, query)
  const [row] = await tasksPageJson[query.status === undefined ? 'all' : 'byStatus'].run(db, params)
  return renderedTaskPage(row!, params)
}

/** listTasks, reading the token's holder in the same statement; undefined when the token does not hold (db/users.ts, tokenHolds). */
export async function listTasksForToken (
  db: Kysely<Database>,
  token: TokenAsk,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<WithHolder<RenderedTaskPage> | undefined> {
  const params = { ...listParams(token.userId, query), jti: token.jti, iat: token.iat }
  const [row] = await tasksPageJsonForToken[query.status === undefined ? 'all' : 'byStatus'].run(db, params)
  return row === undefined ? undefined : { holder: row, result: renderedTaskPage(row, params) }
}

/** listTasks, reading the API key's holder in the same statement; undefined when the key does not live. */
export async function listTasksForKey (
  db: Kysely<Database>,
  key: KeyAsk,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<WithHolder<RenderedTaskPage, KeyHolderRow> | undefined> {
  const params = { ...listParams(key.userId, query), keyHash: key.keyHash }
  const [row] = await tasksPageJsonForKey[query.status === undefined ? 'all' : 'byStatus'].run(db, params)
  return row === undefined ? undefined : { holder: row, result: renderedTaskPage(row, params) }
}

// The schema's defaults fill these in; the fallbacks keep the functions safe on their own.
const listParams = (userId: string, query: { status?: TaskStatus, limit?: number, offset?: number }): ListParams =>
  ({ userId, status: query.status, limit: query.limit ?? 1000, offset: query.offset ?? 0 })

interface RenderedRow { total: number, todo: number, in_progress: number, completed: number, size: number, data: string | null }

function renderedTaskPage (row: RenderedRow, params: ListParams): RenderedTaskPage {
  const { total, todo, in_progress: inProgress, completed, size, data } = row
  const counts = { total, todo, inProgress, completed }
  // No task on the page: no text (string_agg over no row).
  if (size === 0) return { data: '[]', counts }
  const next = params.offset + size
  return { data: `[${data!}]`, counts, ...(next < total && { nextOffset: next }) }
}

export async function findTaskForUser (db: Kysely<Database>, userId: string, id: number): Promise<Task | undefined> {
  const row = await db.selectFrom('tasks').select(TASK_COLUMNS)
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
const recordTaskCreated = (db: QueryCreator<Database & { task: Pick<TaskRow, 'id' | 'user_id'> }>) => db.insertInto('usage_events')
  .columns(['user_id', 'name', 'properties'])
  .expression((eb) => eb.selectFrom('task').select([
    'task.user_id',
    sql.lit('task_created').as('name'),
    sql<string>`jsonb_build_object('userId', task.user_id, 'taskId', task.id)`.as('properties')
  ]))

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
  .with('event', recordTaskCreated)
  .selectFrom('task')
  .select(TASK_COLUMNS))

/** The task's columns beside its holder's, whose names (`id`, `created_at`, `updated_at`) they share: prefixed. */
const TASK_BESIDE_HOLDER = [
  'task.id as task_id', 'task.title as task_title', 'task.description as task_description', 'task.status as task_status',
  'task.due_date as task_due_date', 'task.completed_at as task_completed_at', 'task.created_at as task_created_at',
  'task.updated_at as task_updated_at'
] as const

/** The columns a new task is written with, and their values: the holder's user, the request's fields. */
const NEW_TASK_COLUMNS = ['user_id', 'title', 'description', 'status', 'due_date', 'completed_at'] as const
const newTaskOfHolder = (p: CreateParams) => [
  'holder.id as user_id',
  sql<string>`${p.title}::text`.as('title'),
  sql<string | null>`${p.description}::text`.as('description'),
  sql<TaskStatus>`${p.status}::task_status`.as('status'),
  sql<string | null>`${p.dueDate}::timestamptz`.as('due_date'),
  sql<string | null>`case when ${p.status}::task_status = 'completed' then now() end`.as('completed_at')
] as const

// The same with the token's check (`tokenInStatement`): the task is written only for a token
// that holds (db/users.ts, tokenHolds: the rules accounts/credentials.ts applies to the holder
// row, which comes back beside the task, or without one when the token does not hold).
export const createTaskForTokenStatement = prepareQuery('tasks_create_for_token', (db, p: CreateParams & TokenAsk) => db
  .with('holder', (db) => tokenHolder(db, p))
  .with('task', (db) => db.insertInto('tasks')
    .columns(NEW_TASK_COLUMNS)
    .expression((eb) => eb.selectFrom('holder').where(tokenHolds(p.iat)).select(newTaskOfHolder(p)))
    .returning(['user_id', ...TASK_COLUMNS]))
  .with('event', recordTaskCreated)
  .selectFrom('holder')
  .leftJoin('task', (join) => join.onTrue())
  .selectAll('holder')
  .select(TASK_BESIDE_HOLDER))

// The same with an API key's check (`keyInStatement`): the task is written only while the key
// lives (db/api-keys.ts, keyHolder), whose holder row comes back beside it; no row otherwise.
export const createTaskForKeyStatement = prepareQuery('tasks_create_for_key', (db, p: CreateParams & KeyAsk) => db
  .with('holder', (db) => keyHolder(db, p))
  .with('task', (db) => db.insertInto('tasks')
    .columns(NEW_TASK_COLUMNS)
    .expression((eb) => eb.selectFrom('holder').select(newTaskOfHolder(p)))
    .returning(['user_id', ...TASK_COLUMNS]))
  .with('event', recordTaskCreated)
  .selectFrom('holder')
  .innerJoin('task', (join) => join.onTrue())
  .selectAll('holder')
  .select(TASK_BESIDE_HOLDER))

const createParams = (userId: string, body: CreateTaskBody): CreateParams => ({
  userId,
  title: body.title.trim(),
  description: body.description ?? null,
  status: body.status ?? 'todo',
  dueDate: body.dueDate ?? null
})

/** Creates the task and records its `task_created` usage event, in one statement. */
export async function createTask (db: Kysely<Database>, userId: string, body: CreateTaskBody): Promise<Task> {
  const [row] = await createTaskStatement.run(db, createParams(userId, body))
  return toTask(row!)
}

/**
 * createTask, reading the token's holder in the same statement: the holder's row and the task,
 * which is written only when the token holds (no task otherwise); undefined without a holder
 * (a revoked token, a deleted user).
 */
export async function createTaskForToken (db: Kysely<Database>, token: TokenAsk, body: CreateTaskBody): Promise<WithHolder<Task | undefined> | undefined> {
  const [row] = await createTaskForTokenStatement.run(db, { ...createParams(token.userId, body), jti: token.jti, iat: token.iat })
  if (row === undefined) return undefined
  return { holder: row, result: row.task_id === null ? undefined : taskBesideHolder(row) }
}

/** The task of a row that has one beside its holder's columns (TASK_BESIDE_HOLDER). */
const taskBesideHolder = (row: { [K in keyof TaskFields as `task_${K}`]: TaskFields[K] | null }): Task => toTask({
  id: row.task_id!,
  title: row.task_title!,
  description: row.task_description,
  status: row.task_status!,
  due_date: row.task_due_date,
  completed_at: row.task_completed_at,
  created_at: row.task_created_at!,
  updated_at: row.task_updated_at!
})

/** createTask, reading the API key's holder in the same statement; undefined (no task written) when the key does not live. */
export async function createTaskForKey (db: Kysely<Database>, key: KeyAsk, body: CreateTaskBody): Promise<WithHolder<Task, KeyHolderRow> | undefined> {
  const [row] = await createTaskForKeyStatement.run(db, { ...createParams(key.userId, body), keyHash: key.keyHash })
  return row === undefined ? undefined : { holder: row, result: taskBesideHolder(row) }
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
