// Email: the transactional outbox (each message is a row written in the transaction of the
// change that causes it, delivered later by the sender in plugins/app/mailer.ts) and the
// one-time tokens of password-reset and verification links (only their SHA-256 is kept).
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('email_outbox')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('kind', 'varchar(50)', (c) => c.notNull())
    .addColumn('recipient', 'varchar(255)', (c) => c.notNull())
    // The rendered message, blanked once sent (it may carry a link with a token).
    .addColumn('subject', 'varchar(255)', (c) => c.notNull())
    .addColumn('text_body', 'text')
    .addColumn('html_body', 'text')
    .addColumn('link', 'text')
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // A sender's claim: until then no other sender takes the row.
    .addColumn('locked_until', 'timestamptz')
    .addColumn('last_error', 'text')
    .addColumn('sent_at', 'timestamptz')
    .addColumn('failed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()
  await sql`create index email_outbox_due_idx on email_outbox (next_attempt_at, id) where sent_at is null and failed_at is null`.execute(db)
  await db.schema.createIndex('email_outbox_user_id_idx').on('email_outbox').column('user_id').execute()

  await db.schema.createTable('email_tokens')
    .addColumn('token_hash', 'varchar(64)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('purpose', 'varchar(32)', (c) => c.notNull().check(sql`purpose in ('password_reset', 'email_verification')`))
    // The address the link was sent to: a token for an address the user no longer has is void.
    .addColumn('email', 'varchar(255)', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()
  await db.schema.createIndex('email_tokens_user_id_idx').on('email_tokens').columns(['user_id', 'purpose']).execute()
  await db.schema.createIndex('email_tokens_expires_at_idx').on('email_tokens').column('expires_at').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('email_tokens').execute()
  await db.schema.dropTable('email_outbox').execute()
}
