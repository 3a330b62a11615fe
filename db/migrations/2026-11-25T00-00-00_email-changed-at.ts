// Email links die with the address they were sent to: a token issued before the account's
// last change of address is void (db/email.ts), even once the account is back on the
// address it was sent to (A → B → A).
import { type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').addColumn('email_changed_at', 'timestamptz').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').dropColumn('email_changed_at').execute()
}
