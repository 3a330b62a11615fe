// A notice on the channel `token_holder_changed` whenever a row that a token check reads
// changes (db/users.ts, tokenHolder: users, sessions, revoked_tokens), its payload the user's
// id ('' for a TRUNCATE: every user). PostgreSQL sends it when the change commits, to the
// sessions that LISTEN. Only where the setting `app.token_holder_notices` is 'on': the
// embedded database sets it at start-up (db/engine/connect.ts), whose one process keeps the
// token holders it read until told they changed (accounts/holder-cache.ts). A PostgreSQL
// server leaves it unset: its fleet checks every token in the database, and a notice nobody
// waits for would still take the notification queue's lock at every commit that sends one.
import { sql, type Kysely } from 'kysely'

const TABLES = [['users', 'id'], ['sessions', 'user_id'], ['revoked_tokens', 'user_id']] as const

export async function up (db: Kysely<any>): Promise<void> {
  await sql`create function token_holder_changed() returns trigger language plpgsql as $$
    begin
      if current_setting('app.token_holder_notices', true) is distinct from 'on' then
        return null;
      end if;
      if tg_op = 'TRUNCATE' then
        perform pg_notify('token_holder_changed', '');
      elsif tg_op = 'DELETE' then
        perform pg_notify('token_holder_changed', to_jsonb(old) ->> tg_argv[0]);
      else
        perform pg_notify('token_holder_changed', to_jsonb(new) ->> tg_argv[0]);
      end if;
      return null;
    end
  $$`.execute(db)
  for (const [table, userColumn] of TABLES) {
    await sql`create trigger ${sql.id(`${table}_token_holder_changed`)} after insert or update or delete on ${sql.table(table)}
      for each row execute function token_holder_changed(${sql.lit(userColumn)})`.execute(db)
    await sql`create trigger ${sql.id(`${table}_token_holders_truncated`)} after truncate on ${sql.table(table)}
      for each statement execute function token_holder_changed(${sql.lit(userColumn)})`.execute(db)
  }
}

export async function down (db: Kysely<any>): Promise<void> {
  for (const [table] of TABLES) {
    await sql`drop trigger ${sql.id(`${table}_token_holder_changed`)} on ${sql.table(table)}`.execute(db)
    await sql`drop trigger ${sql.id(`${table}_token_holders_truncated`)} on ${sql.table(table)}`.execute(db)
  }
  await sql`drop function token_holder_changed()`.execute(db)
}
