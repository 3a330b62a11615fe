// The user's open checkout session at the provider: a new checkout expires the one before
// it, and account deletion expires it, so a user never has two checkouts that can be paid.
import { type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_preferences').addColumn('payment_checkout_session_id', 'varchar(255)').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_preferences').dropColumn('payment_checkout_session_id').execute()
}
