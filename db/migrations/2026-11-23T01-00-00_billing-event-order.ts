// Billing events in any order end in one state: the stored subscription's fields fall in
// three groups (status; period end; price and cancel-at-period-end), and each group keeps
// the provider time and the precedence of the event that last set it (db/billing-rules.ts).
// `payment_state_at` is the status group's time; existing rows start all groups from it.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_preferences')
    .addColumn('payment_state_precedence', 'smallint', (c) => c.notNull().defaultTo(0))
    .addColumn('payment_period_end_at', 'timestamptz')
    .addColumn('payment_period_end_precedence', 'smallint', (c) => c.notNull().defaultTo(0))
    .addColumn('payment_terms_at', 'timestamptz')
    .addColumn('payment_terms_precedence', 'smallint', (c) => c.notNull().defaultTo(0))
    .execute()
  await sql`update user_preferences set payment_period_end_at = payment_state_at, payment_terms_at = payment_state_at
    where payment_state_at is not null`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_preferences')
    .dropColumn('payment_terms_precedence')
    .dropColumn('payment_terms_at')
    .dropColumn('payment_period_end_precedence')
    .dropColumn('payment_period_end_at')
    .dropColumn('payment_state_precedence')
    .execute()
}
