// Tasks, always scoped to their owner: every query takes the user id.
import { sql, type Kysely, type RawBuilder } from 'kysely'
import type { CreateTaskBody, Task, UpdateTaskBody } from '../schemas/tasks.js'
import type { Database, TaskRow, TaskStatus } from './types.js'

const iso = (d: Date | null): string | null => d === null ? null : d.toISOString()

export const toTask = (row: TaskRow): Task => ({
  id: row.id,
  title: row.title,
  description: row.description,
  status: row.status,
  dueDate: iso(row.due_date),
  completedAt: iso(row.completed_at),
  createdAt: row.created_at.toISOString(),
  updatedAt: row.updated_at.toISOString()
})

// completed_at is set when a task enters `completed`, kept while it stays there,
// and cleared when it leaves.
const completedAtFor = (status: TaskStatus): RawBuilder<Date | null> =>
  status === 'completed' ? sql<Date>`coalesce(completed_at, now())` : sql<null>`null`

export async function listTasks (
  db: Kysely<Database>,
  userId: string,
  query: { status?: TaskStatus, limit?: number, offset?: number }
): Promise<{ tasks: Task[], total: number }> {
  let base = db.selectFrom('tasks').where('user_id', '=', userId)
  if (query.status) base = base.where('status', '=', query.status)
  const [rows, count] = await Promise.all([
    base.selectAll()
      .orderBy('created_at', 'desc').orderBy('id', 'desc')
      // The schema's defaults fill these in; the fallbacks keep the function safe on its own.
      .limit(query.limit ?? 50).offset(query.offset ?? 0)
      .execute(),
    base.select(sql<number>`count(*)::int`.as('total')).executeTakeFirstOrThrow()
  ])
  return { tasks: rows.map(toTask), total: count.total }
}

export async function findTaskForUser (db: Kysely<Database>, userId: string, id: number): Promise<Task | undefined> {
  const row = await db.selectFrom('tasks').selectAll()
    .where('id', '=', id).where('user_id', '=', userId)
    .executeTakeFirst()
  return row && toTask(row)
}

export async function insertTask (db: Kysely<Database>, userId: string, body: CreateTaskBody): Promise<Task> {
  const status = body.status ?? 'todo'
  const row = await db.insertInto('tasks')
    .values({
      user_id: userId,
      title: body.title.trim(),
      description: body.description ?? null,
      status,
      due_date: body.dueDate ?? null,
      completed_at: status === 'completed' ? sql<Date>`now()` : null
    })
    .returningAll()
    .executeTakeFirstOrThrow()
  return toTask(row)
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
