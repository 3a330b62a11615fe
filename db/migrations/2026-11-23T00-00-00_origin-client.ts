// What the origin web client needs: push notifications and a time zone among the
// preferences; and the time of the last password change, which ends every token issued
// before it (compared with the token's `iat`, so tokens need no claim of our own).
// `users.token_version` is left in place, unused, so instances of the previous version
// keep working during a rolling deploy; a later migration drops it.
import { type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('user_preferences')
    .addColumn('push_notifications', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('timezone', 'varchar(100)')
    .execute()
  await db.schema.alterTable('users').addColumn('password_changed_at', 'timestamptz').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').dropColumn('password_changed_at').execute()
  await db.schema.alterTable('user_preferences').dropColumn('timezone').dropColumn('push_notifications').execute()
}
