// Personal API keys (auth-extensions §5, docs/api-keys.md): one row per key, its SHA-256
// only (the key is 256 random bits: no salt or slow hash adds anything), the first 8
// characters after `tsk_` as its `prefix` for lists, its scopes space-separated.
// `revoked_at` is when it stops working: null while it lives, a time in the future while a
// rotated key's grace runs, now or past once revoked (by its owner, a password reset, or
// whoever found it). `last_used_at` and `last_used_address` are written at most once a minute.
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('api_keys')
    .addColumn('id', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'varchar(100)', (c) => c.notNull())
    .addColumn('prefix', 'char(8)', (c) => c.notNull())
    .addColumn('key_hash', 'char(64)', (c) => c.notNull().unique())
    .addColumn('scopes', 'varchar(255)', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('expires_at', 'timestamptz')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('last_used_address', 'varchar(64)')
    .addColumn('revoked_at', 'timestamptz')
    // Why: owner, rotated, password-reset, reported.
    .addColumn('revoked_reason', 'varchar(32)')
    .execute()
  await db.schema.createIndex('api_keys_user_idx').on('api_keys').columns(['user_id', 'created_at']).execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('api_keys').execute()
}
