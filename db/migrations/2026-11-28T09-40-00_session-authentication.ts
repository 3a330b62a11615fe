// Step-up (auth-extensions §6, docs/sessions.md): each session records how and when its holder
// last proved who they are.
// - methods: the factors of its sign-in (`password`, `totp`, `recovery`, `passkey`, `provider`,
//   `external`), space-separated. Null on rows the previous version writes during a rolling
//   deploy: read as the method says (db/sessions.ts);
// - authenticated_at: when it signed in (its token's `iat` for a token signed elsewhere); the
//   previous version's rows get the time of their insert;
// - stepped_up_at, stepped_up_with: its last step-up (POST /auth/step-up) and with what.
// Existing sessions: their methods from their method, authenticated when they were created.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sessions')
    .addColumn('methods', 'varchar(128)')
    .addColumn('authenticated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('stepped_up_at', 'timestamptz')
    .addColumn('stepped_up_with', 'varchar(32)')
    .execute()
  await sql`update sessions set authenticated_at = created_at,
    methods = case method when 'provider' then 'provider' when 'external' then 'external' else 'password' end`.execute(db)
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sessions')
    .dropColumn('methods')
    .dropColumn('authenticated_at')
    .dropColumn('stepped_up_at')
    .dropColumn('stepped_up_with')
    .execute()
}
