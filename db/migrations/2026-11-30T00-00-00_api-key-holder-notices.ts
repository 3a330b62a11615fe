// The same notice as a token holder's (2026-11-29T00-00-00_token-holder-notices.ts, its function
// token_holder_changed, on the channel `token_holder_changed`, the payload the user's id) for
// every change to an API key: where the embedded database turned the notices on, its process
// keeps the holders of the keys it has read live (accounts/holder-cache.ts), so a revoked,
// rotated or deleted key must be forgotten before the change's own answer. A key's
// `last_used_at`, written at most once a minute a key, sends one too: the kept row is read
// again, with its new time. A PostgreSQL server leaves the notices off and sends none.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await sql`create trigger api_keys_token_holder_changed after insert or update or delete on api_keys
    for each row execute function token_holder_changed('user_id')`.execute(db)
  await sql`create trigger api_keys_token_holders_truncated after truncate on api_keys
    for each statement execute function token_holder_changed('user_id')`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await sql`drop trigger api_keys_token_holder_changed on api_keys`.execute(db)
  await sql`drop trigger api_keys_token_holders_truncated on api_keys`.execute(db)
}
