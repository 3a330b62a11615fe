// Idempotency-Key (plugins/app/idempotency.ts): per user, each key's request fingerprint and
// the answer it got, kept 24 hours so that a retried POST gets that answer instead of being
// carried out again. A row without an answer is a request still running under a lease (or
// one that failed, whose key is free again).
import { sql, type Kysely } from 'kysely'

export async function up (db: Kysely<any>): Promise<void> {
  await db.schema.createTable('idempotency_keys')
    .addColumn('user_id', 'varchar(255)', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('key', 'varchar(255)', (c) => c.notNull())
    // SHA-256 (hex) of the method, the route and the canonical body: a repeat must match it.
    .addColumn('request_hash', 'varchar(64)', (c) => c.notNull())
    .addColumn('response_status', 'integer')
    .addColumn('response_body', 'text')
    // While a request holds the key: until when, and which attempt (a takeover after the
    // lease ends gets a new token, so the attempt it replaced cannot store its answer).
    .addColumn('locked_until', 'timestamptz')
    .addColumn('lease_token', 'varchar(64)')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('idempotency_keys_pkey', ['user_id', 'key'])
    .execute()
  // A user's keys, oldest first: the per-user bound evicts from this end.
  await db.schema.createIndex('idempotency_keys_user_created_idx').on('idempotency_keys').columns(['user_id', 'created_at']).execute()
  // The purge of expired keys.
  await db.schema.createIndex('idempotency_keys_created_idx').on('idempotency_keys').column('created_at').execute()
}

export async function down (db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('idempotency_keys').execute()
}
