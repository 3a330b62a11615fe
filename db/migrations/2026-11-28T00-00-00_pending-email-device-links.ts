// Security round four (docs/security.md):
// - users.pending_email: an email change waits for the new address to confirm it; until then
//   the account keeps its address (pending_email_at: when it was asked, so a link sent for an
//   earlier request to the same address stays dead);
// - user_identities.account_email: the account's address when the identity was linked; a
//   confirmation of another address (a change, a reset) removes the identities linked under
//   an address the account no longer holds. Identities linked before this migration get the
//   account's address only where it has not changed since they were linked (email_changed_at):
//   the others were linked under an address the account has left, perhaps moved there by an
//   attacker, and go at the owner's next reset;
// - email_tokens: a third purpose, the link that lets a device past an account's lock;
// - email_outbox.digest: a security notice held back past the inbox's hourly cap, sent with
//   the others held for that address as one digest when the hour ends.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users')
    .addColumn('pending_email', 'varchar(255)')
    .addColumn('pending_email_at', 'timestamptz')
    .execute()

  await db.schema.alterTable('user_identities').addColumn('account_email', 'varchar(255)').execute()
  await sql`update user_identities i set account_email = u.email from users u
    where u.id = i.user_id and (u.email_changed_at is null or u.email_changed_at <= i.created_at)`.execute(db)

  await sql`alter table email_tokens drop constraint email_tokens_purpose_check`.execute(db)
  await sql`alter table email_tokens add constraint email_tokens_purpose_check check (purpose in ('password_reset', 'email_verification', 'device_link'))`.execute(db)

  await db.schema.alterTable('email_outbox').addColumn('digest', 'boolean', (c) => c.notNull().defaultTo(false)).execute()
  await sql`create index email_outbox_held_idx on email_outbox (recipient) where digest and sent_at is null and failed_at is null`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await sql`drop index email_outbox_held_idx`.execute(db)
  await db.schema.alterTable('email_outbox').dropColumn('digest').execute()
  await db.deleteFrom('email_tokens').where('purpose', '=', 'device_link').execute()
  await sql`alter table email_tokens drop constraint email_tokens_purpose_check`.execute(db)
  await sql`alter table email_tokens add constraint email_tokens_purpose_check check (purpose in ('password_reset', 'email_verification'))`.execute(db)
  await db.schema.alterTable('user_identities').dropColumn('account_email').execute()
  await db.schema.alterTable('users').dropColumn('pending_email').dropColumn('pending_email_at').execute()
}
