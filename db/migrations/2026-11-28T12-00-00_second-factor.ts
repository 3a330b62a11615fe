// A second factor (auth-extensions §3, docs/second-factor.md):
// - totp_factors: one per user. `secret` is the TOTP seed sealed with AES-256-GCM under
//   MFA_ENCRYPTION_KEY (accounts/secret-seal.ts), never the seed itself; `confirmed_at` null
//   while an enrolment waits for its first code; `last_step` the last accepted 30-second step,
//   advanced only forward (compare-and-set), so each code works once; `failures` the account's
//   consecutive wrong second-factor answers, and `suspended_until` the end of the 15 minutes
//   that ten of them cost;
// - recovery_codes: one row per code, its SHA-256 only, used once (`used_at`);
// - mfa_challenges: the `mfaToken` of a sign-in whose password (or reset, or provider) checked
//   out and waits for the second factor: its SHA-256 only, 5 minutes, 5 tries, used once, bound
//   to the password it followed (a fingerprint of its hash).
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('totp_factors')
    .addColumn('user_id', 'varchar(255)', (c) => c.primaryKey().references('users.id').onDelete('cascade'))
    .addColumn('secret', 'varchar(255)', (c) => c.notNull())
    .addColumn('confirmed_at', 'timestamptz')
    .addColumn('last_step', 'integer')
    .addColumn('failures', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('suspended_until', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute()

  await db.schema.createTable('recovery_codes')
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('code_hash', 'char(64)', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('recovery_codes_pk', ['user_id', 'code_hash'])
    .execute()

  await db.schema.createTable('mfa_challenges')
    .addColumn('token_hash', 'char(64)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    // What checked out before it: password, password-reset or provider (and which provider).
    .addColumn('way', 'varchar(32)', (c) => c.notNull())
    .addColumn('provider', 'varchar(64)')
    .addColumn('password_fingerprint', 'char(64)', (c) => c.notNull())
    .addColumn('tries_left', 'integer', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('mfa_challenges_user_idx').on('mfa_challenges').column('user_id').execute()
  await db.schema.createIndex('mfa_challenges_expires_idx').on('mfa_challenges').column('expires_at').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('mfa_challenges').execute()
  await db.schema.dropTable('recovery_codes').execute()
  await db.schema.dropTable('totp_factors').execute()
}
