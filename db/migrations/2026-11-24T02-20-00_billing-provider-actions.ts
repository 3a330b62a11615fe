// Billing: the provider calls a webhook decided on (cancelling a subscription nobody may be
// billed for), recorded in the transaction of the decision and carried out after it commits
// by the worker in billing/provider-actions.ts, retried until done or given up.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('billing_provider_actions')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('kind', 'varchar(50)', (c) => c.notNull())
    .addColumn('subscription_id', 'varchar(255)', (c) => c.notNull())
    // Why, for whom and from which event, for the operator; no foreign key: the account may be gone.
    .addColumn('reason', 'varchar(50)', (c) => c.notNull())
    .addColumn('user_id', 'varchar(255)')
    .addColumn('payment_event_id', 'varchar(255)')
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // A worker's claim: until then no other worker takes the row.
    .addColumn('locked_until', 'timestamptz')
    .addColumn('last_error', 'text')
    .addColumn('done_at', 'timestamptz')
    .addColumn('failed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // One action of a kind per subscription, whichever events decide it.
    .addUniqueConstraint('billing_provider_actions_kind_subscription_key', ['kind', 'subscription_id'])
    .execute()
  await sql`create index billing_provider_actions_due_idx on billing_provider_actions (next_attempt_at, id) where done_at is null and failed_at is null`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('billing_provider_actions').execute()
}
