// Each task keeps its answer: `tasks.answer` is the task's JSON as the API writes it (the Task
// schema's keys in its order, timestamps as 2026-11-23T05:08:02.519Z, compact, escaped as
// JSON.stringify escapes), a column PostgreSQL computes from the others whenever a row is
// written, whoever writes it. GET /tasks joins these texts instead of rendering 50 rows on
// every read: rendering per read (to_char four times and row_to_json per task) took the
// database's CPU per GET /tasks from 312-375 µs (765139d, rows decoded by the service) to
// 530-719 µs, and a lone /health probe waited for the CPU those backends took (bench/README.md,
// issue 30). Stored, the page's statement costs about half what it did rendered.
//
// A trigger computes it, before every insert and update of a row, so no write can leave it
// behind (one that sets it itself is overwritten); only a session that turns triggers off
// (session_replication_role = replica, as replication tools do) could. Not a generated column:
// that needs an immutable expression, and to_char and row_to_json are marked stable, so it
// would need a SQL function declared immutable around them, which PostgreSQL sets up again for
// every statement that writes a row: on the embedded database an insert took 120-140 µs more
// with it, 45-55 µs more with this trigger (PL/pgSQL keeps its plans for the session). The
// default '' only lets an insert leave the column out; the trigger always writes it.
//
// A status's text is its enum label: a migration that renames a label (ALTER TYPE … RENAME
// VALUE) must recompute the answers too (`update tasks set answer = ''`).
//
// The tasks already there are filled in by rewriting the table once (ALTER COLUMN … TYPE with
// USING, from a function of this migration's session that writes what the trigger writes):
// measured on PostgreSQL 15 here, 1,000,000 tasks took 15.1 s and the table with its indexes
// grew from 313 MB to 519 MB; an UPDATE of every row took 27.9 s and left 753 MB. The
// migration's transaction holds the table's exclusive lock meanwhile: reads and writes of
// tasks wait, other tables do not (docs/database.md).
import { sql, type Kysely, type RawBuilder } from 'kysely'

const ISO = sql.lit('YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')

/** The answer of the task `row` (a row of tasks), as an expression: the trigger's and the backfill's. */
const answerOf = (row: string): RawBuilder<string> => {
  const column = (name: string) => sql.raw(`${row}.${name}`)
  const time = (name: string) => sql`to_char(${column(name)} at time zone 'UTC', ${ISO})`
  return sql`row_to_json(task)::text from (select
    ${column('id')} as "id", ${column('title')} as "title", ${column('description')} as "description",
    ${column('status')}::text as "status", ${time('due_date')} as "dueDate", ${time('completed_at')} as "completedAt",
    ${time('created_at')} as "createdAt", ${time('updated_at')} as "updatedAt"
  ) as task`
}

export async function up (db: Kysely<any>): Promise<void> {
  await sql`create function tasks_answer() returns trigger language plpgsql as $$
    begin
      new.answer := ${answerOf('new')};
      return new;
    end
  $$`.execute(db)
  await sql`alter table tasks add column answer text not null default ''`.execute(db)
  await sql`create trigger tasks_answer before insert or update on tasks for each row execute function tasks_answer()`.execute(db)
  await sql`create function pg_temp.task_answer(t tasks) returns text language sql stable as $$ select ${answerOf('t')} $$`.execute(db)
  await sql`alter table tasks alter column answer type text using pg_temp.task_answer(tasks)`.execute(db)
  await sql`drop function pg_temp.task_answer(tasks)`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await sql`drop trigger tasks_answer on tasks`.execute(db)
  await sql`alter table tasks drop column answer`.execute(db)
  await sql`drop function tasks_answer()`.execute(db)
}
