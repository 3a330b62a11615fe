// Nothing at rest is a usable email link: a queued message with a link keeps a nonce, not
// the link. The token is an HMAC of the nonce under a key derived from the service's secret,
// computed when the message is sent (mail/outbox.ts), with the message's bodies. Rows queued
// before this migration keep their rendered bodies and are sent as they are.
import { type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('email_outbox').addColumn('link_nonce', 'varchar(64)').execute()
  await db.schema.alterTable('email_outbox').dropColumn('link').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('email_outbox').addColumn('link', 'text').execute()
  await db.schema.alterTable('email_outbox').dropColumn('link_nonce').execute()
}
