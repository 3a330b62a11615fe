// Sessions users can see and end, the security-events feed, and sign-in through OpenID
// Connect providers (docs/sessions.md, docs/identity-providers.md):
// - sessions: one row per sign-in, keyed by its token's `jti`; an ended row is kept until
//   its token would have expired, so the token stays refused;
// - users.password becomes optional (accounts made through a provider have none), and
//   users.other_tokens_ended_at ends tokens minted elsewhere (no session row) on
//   "sign out everywhere else";
// - user_identities: a provider's subject (issuer + sub) linked to a user;
// - oidc_flows: a started sign-in (state, nonce, PKCE verifier), used once, 10 minutes;
// - sign_in_codes: the one-time code the callback hands the web client, 60 seconds, once;
// - security_events: 90 days of what happened to an account; failed sign-ins one row a day.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('users').alterColumn('password', (c) => c.dropNotNull()).execute()
  await db.schema.alterTable('users').addColumn('other_tokens_ended_at', 'timestamptz').execute()

  await db.schema.createTable('sessions')
    // The token's `jti`: text, as tokens minted elsewhere may carry any string.
    .addColumn('id', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('method', 'varchar(32)', (c) => c.notNull())
    .addColumn('provider', 'varchar(64)')
    .addColumn('address', 'varchar(64)')
    .addColumn('user_agent', 'varchar(512)')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_seen_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('ended_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('sessions_user_idx').on('sessions').columns(['user_id', 'created_at']).execute()
  await db.schema.createIndex('sessions_expires_idx').on('sessions').column('expires_at').execute()

  await db.schema.createTable('user_identities')
    .addColumn('id', 'varchar(64)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    // The configured provider's id (OIDC_PROVIDERS); the identity itself is issuer + subject.
    .addColumn('provider', 'varchar(64)', (c) => c.notNull())
    .addColumn('issuer', 'varchar(512)', (c) => c.notNull())
    .addColumn('subject', 'varchar(255)', (c) => c.notNull())
    .addColumn('email', 'varchar(255)')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('user_identities_issuer_subject_key', ['issuer', 'subject'])
    .execute()
  await db.schema.createIndex('user_identities_user_idx').on('user_identities').column('user_id').execute()

  await db.schema.createTable('oidc_flows')
    // SHA-256 (hex) of `state`; the state itself travels only through the browser.
    .addColumn('state_hash', 'varchar(64)', (c) => c.primaryKey())
    .addColumn('provider', 'varchar(64)', (c) => c.notNull())
    .addColumn('nonce', 'varchar(128)', (c) => c.notNull())
    .addColumn('code_verifier', 'varchar(128)', (c) => c.notNull())
    // SHA-256 (hex) of the browser's flow cookie: the callback must come from the same browser.
    .addColumn('browser_hash', 'varchar(64)', (c) => c.notNull())
    .addColumn('return_to', 'varchar(2048)', (c) => c.notNull())
    // Set when a signed-in user links an identity, with the session that asked: the link
    // completes only while that session is live.
    .addColumn('link_user_id', 'varchar(255)', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('link_session_id', 'varchar(255)')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('oidc_flows_expires_idx').on('oidc_flows').column('expires_at').execute()

  await db.schema.createTable('sign_in_codes')
    .addColumn('code_hash', 'varchar(64)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('provider', 'varchar(64)', (c) => c.notNull())
    // The flow's browser binding, carried over: only the browser that began the sign-in may exchange it.
    .addColumn('browser_hash', 'varchar(64)', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('sign_in_codes_user_idx').on('sign_in_codes').column('user_id').execute()
  await db.schema.createIndex('oidc_flows_link_user_idx').on('oidc_flows').column('link_user_id').execute()
  await db.schema.createIndex('sign_in_codes_expires_idx').on('sign_in_codes').column('expires_at').execute()

  await db.schema.createTable('security_events')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('type', 'varchar(48)', (c) => c.notNull())
    .addColumn('method', 'varchar(32)')
    .addColumn('provider', 'varchar(64)')
    .addColumn('address', 'varchar(64)')
    .addColumn('user_agent', 'varchar(512)')
    // Failed sign-ins: one row per user and UTC day, counting; created_at stays the first
    // failure's (the feed's order never changes), address and agent become the last one's.
    .addColumn('day', 'date', (c) => c.notNull().defaultTo(sql`(now() at time zone 'utc')::date`))
    .addColumn('count', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()
  await db.schema.createIndex('security_events_user_idx').on('security_events').columns(['user_id', 'created_at']).execute()
  await db.schema.createIndex('security_events_created_idx').on('security_events').column('created_at').execute()
  await db.schema.createIndex('security_events_failed_day_key').on('security_events').columns(['user_id', 'day'])
    .unique().where(sql<boolean>`type = 'sign-in-failed'`).execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('security_events').execute()
  await db.schema.dropTable('sign_in_codes').execute()
  await db.schema.dropTable('oidc_flows').execute()
  await db.schema.dropTable('user_identities').execute()
  await db.schema.dropTable('sessions').execute()
  await db.schema.alterTable('users').dropColumn('other_tokens_ended_at').execute()
  // Accounts without a password cannot go back: the down migration refuses while there are any.
  await db.schema.alterTable('users').alterColumn('password', (c) => c.setNotNull()).execute()
}
