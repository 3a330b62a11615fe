// Passkeys (auth-extensions §4, docs/passkeys.md):
// - passkey_users: the WebAuthn user handle of each user who asked to register one: 32 random
//   bytes, never the account's id or address, so what an authenticator keeps says nothing of
//   the account; made once, kept for life (a handle that changed would orphan passkeys);
// - passkeys: one row per registered credential: its id (base64url, unique across accounts),
//   its COSE public key (base64url), the signature counter (bigint: an authenticator's is a
//   32-bit unsigned number), transports, the backup flags (`backup_eligible` fixed at
//   registration: a device-bound credential never becomes a synced one; `backed_up` as last
//   seen), the authenticator model (AAGUID), and the owner's name for it;
// - webauthn_challenges: each ceremony's challenge, its SHA-256 only, for one purpose
//   (registration, sign-in, second-factor, step-up), bound to the user, session or `mfaToken`
//   it was made for, 5 minutes, used once (compare-and-set on `used_at`), so any instance can
//   finish a ceremony another began.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('passkey_users')
    .addColumn('user_id', 'varchar(255)', (c) => c.primaryKey().references('users.id').onDelete('cascade'))
    .addColumn('handle', 'varchar(128)', (c) => c.notNull().unique())
    .execute()

  await db.schema.createTable('passkeys')
    .addColumn('id', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'varchar(64)', (c) => c.notNull())
    .addColumn('credential_id', 'varchar(1400)', (c) => c.notNull().unique())
    .addColumn('public_key', 'text', (c) => c.notNull())
    .addColumn('counter', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('transports', 'varchar(255)', (c) => c.notNull().defaultTo(''))
    .addColumn('backup_eligible', 'boolean', (c) => c.notNull())
    .addColumn('backed_up', 'boolean', (c) => c.notNull())
    .addColumn('aaguid', 'varchar(36)')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_used_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('passkeys_user_idx').on('passkeys').columns(['user_id', 'created_at']).execute()

  await db.schema.createTable('webauthn_challenges')
    .addColumn('challenge_hash', 'char(64)', (c) => c.primaryKey())
    .addColumn('purpose', 'varchar(16)', (c) => c.notNull())
    .addColumn('user_id', 'varchar(255)', (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('session_id', 'varchar(255)')
    .addColumn('mfa_token_hash', 'char(64)')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('webauthn_challenges_expires_idx').on('webauthn_challenges').column('expires_at').execute()
  await db.schema.createIndex('webauthn_challenges_user_idx').on('webauthn_challenges').column('user_id').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('webauthn_challenges').execute()
  await db.schema.dropTable('passkeys').execute()
  await db.schema.dropTable('passkey_users').execute()
}
