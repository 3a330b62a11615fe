// Server-side logout: a revoked token id stays here until the token would have expired anyway.
import { sql, type Kysely } from 'kysely'
import type { Database } from './types.js'

export async function revokeToken (db: Kysely<Database>, token: { jti: string, userId: string, expiresAt: Date }): Promise<void> {
  await db.insertInto('revoked_tokens')
    .values({ jti: token.jti, user_id: token.userId, expires_at: token.expiresAt })
    .onConflict((oc) => oc.column('jti').doNothing())
    .execute()
  // Housekeeping on a rare path keeps the table small without a scheduler.
  await db.deleteFrom('revoked_tokens').where('expires_at', '<', sql<string>`now()`).execute()
}
