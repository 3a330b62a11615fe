// Billing: provider events applied exactly once, the provider state's timestamp for
// ordering, and indexes for the webhook look-ups by customer and subscription.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('payment_events')
    .addColumn('id', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('type', 'varchar(255)', (c) => c.notNull())
    .addColumn('provider_created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('received_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()

  // `created` of the provider event that last set the subscription fields: an older
  // event arriving late must not overwrite a newer state.
  await db.schema.alterTable('user_preferences').addColumn('payment_state_at', 'timestamptz').execute()
  await sql`create unique index user_preferences_payment_customer_id_key on user_preferences (payment_customer_id) where payment_customer_id is not null`.execute(db)
  await db.schema.createIndex('user_preferences_payment_subscription_id_idx').on('user_preferences').column('payment_subscription_id').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('user_preferences_payment_subscription_id_idx').execute()
  await db.schema.dropIndex('user_preferences_payment_customer_id_key').execute()
  await db.schema.alterTable('user_preferences').dropColumn('payment_state_at').execute()
  await db.schema.dropTable('payment_events').execute()
}
