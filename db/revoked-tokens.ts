// Server-side logout: a revoked token id stays here until the token would have expired anyway.
import { sql, type Kysely } from 'kysely'
import type { Database } from './types.js'

export async function revokeToken (db: Kysely<Database>, token: { jti: string, userId: string, expiresAt: Date }): Promise<void> {
  await db.insertInto('revoked_tokens')
    .values({ jti: token.jti, user_id: token.userId, expires_at: token.expiresAt })
    .onConflict((oc) => oc.column('jti').doNothing())
    .execute()
}

/** Revocations of tokens that have expired anyway: a job of plugins/app/authenticate.ts. */
export async function purgeExpiredRevocations (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('revoked_tokens').where('expires_at', '<', sql<string>`now()`).executeTakeFirst()
  return Number(result.numDeletedRows)
}
