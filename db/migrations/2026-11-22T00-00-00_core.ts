// Core schema: users, preferences, tasks, token revocation and usage events.
// Frozen in time: no application imports; change the schema with a new migration.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await sql`create type task_status as enum ('todo', 'in-progress', 'completed')`.execute(db)

  await db.schema.createTable('users')
    .addColumn('id', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('name', 'varchar(255)')
    .addColumn('email', 'varchar(255)', (c) => c.notNull().unique().check(sql`email = lower(email)`))
    .addColumn('password', 'varchar(255)', (c) => c.notNull())
    .addColumn('image', 'varchar(255)')
    .addColumn('email_verified', 'timestamptz')
    .addColumn('token_version', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()

  await db.schema.createTable('user_preferences')
    .addColumn('id', 'serial', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().unique().references('users.id').onDelete('cascade'))
    .addColumn('theme', 'varchar(50)', (c) => c.notNull().defaultTo('system'))
    .addColumn('language', 'varchar(10)', (c) => c.notNull().defaultTo('en'))
    .addColumn('plan', 'varchar(50)', (c) => c.notNull().defaultTo('free'))
    .addColumn('default_status', sql`task_status`, (c) => c.notNull().defaultTo('todo'))
    .addColumn('email_notifications', 'boolean', (c) => c.notNull().defaultTo(true))
    .addColumn('task_reminders', 'boolean', (c) => c.notNull().defaultTo(true))
    .addColumn('weekly_digest', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('payment_customer_id', 'varchar(255)')
    .addColumn('payment_subscription_id', 'varchar(255)')
    .addColumn('payment_subscription_status', 'varchar(50)')
    .addColumn('payment_price_id', 'varchar(255)')
    .addColumn('payment_current_period_end', 'timestamptz')
    .addColumn('cancel_at_period_end', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()

  await db.schema.createTable('tasks')
    .addColumn('id', 'serial', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('title', 'varchar(255)', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('status', sql`task_status`, (c) => c.notNull().defaultTo('todo'))
    .addColumn('due_date', 'timestamptz')
    .addColumn('completed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()
  // The list query: one user's tasks newest first, optionally by status.
  await sql`create index tasks_user_created_idx on tasks (user_id, created_at desc, id desc)`.execute(db)
  await sql`create index tasks_user_status_created_idx on tasks (user_id, status, created_at desc, id desc)`.execute(db)

  await db.schema.createTable('revoked_tokens')
    .addColumn('jti', 'varchar(64)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('revoked_tokens_expires_at_idx').on('revoked_tokens').column('expires_at').execute()
  await db.schema.createIndex('revoked_tokens_user_id_idx').on('revoked_tokens').column('user_id').execute()

  await db.schema.createTable('usage_events')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'varchar(64)', (c) => c.notNull())
    .addColumn('properties', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()
  await db.schema.createIndex('usage_events_user_id_idx').on('usage_events').columns(['user_id', 'created_at']).execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  for (const table of ['usage_events', 'revoked_tokens', 'tasks', 'user_preferences', 'users']) {
    await db.schema.dropTable(table).execute()
  }
  await sql`drop type task_status`.execute(db)
}
