// Server-side logout: a revoked token id stays here until the token would have expired anyway.
import { sql, type Kysely } from 'kysely'
import type { Database } from './types.js'

export async function revokeToken (db: Kysely<Database>, token: { jti: string, userId: string, expiresAt: Date }): Promise<void> {
  await db.insertInto('revoked_tokens')
    .values({ jti: token.jti, user_id: token.userId, expires_at: token.expiresAt })
    .onConflict((oc) => oc.column('jti').doNothing())
    .execute()
}

/**
 * Revocations of tokens that expired a day ago: a job of plugins/app/authenticate.ts. The day
 * covers clocks that disagree (expires_at is the app's, now() the database's), as for sessions
 * (db/sessions.ts): for a token signed elsewhere the revocation is all that refuses it.
 */
export async function purgeExpiredRevocations (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('revoked_tokens').where('expires_at', '<', sql<string>`now() - interval '1 day'`).executeTakeFirst()
  return Number(result.numDeletedRows)
}
