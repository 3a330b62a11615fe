// The one-time email tokens (reset and verification links): only their SHA-256 is stored,
// looked up by hash, used once, and void once the account's address is not the one they
// were sent to (docs/email.md).
import { sql, type Kysely } from 'kysely'
import type { Database, EmailTokenPurpose, UserRow } from './types.js'

export async function insertEmailToken (
  db: Kysely<Database>,
  token: { hash: string, userId: string, purpose: EmailTokenPurpose, email: string, ttlMs: number }
): Promise<void> {
  await db.insertInto('email_tokens').values({
    token_hash: token.hash,
    user_id: token.userId,
    purpose: token.purpose,
    email: token.email,
    expires_at: sql`now() + ${token.ttlMs}::int * interval '1 millisecond'`
  }).execute()
}

// A token is for the address the user has now, and was issued since the account last
// changed its address: after A → B → A, links sent to A the first time stay dead. Both sides
// are transaction times (now()), so a link issued with the change itself (the verification
// of the new address) counts as after it.
const tokenStillFitsUser = sql<boolean>`users.email = email_tokens.email and (users.email_changed_at is null or email_tokens.created_at >= users.email_changed_at)`

/**
 * The user a live token names: unused, unexpired, of this purpose, and issued for the
 * address the user still has, since they last changed it. Looked up by hash, so no
 * comparison of secrets takes place.
 */
export function findUserForEmailToken (db: Kysely<Database>, hash: string, purpose: EmailTokenPurpose): Promise<UserRow | undefined> {
  return db.selectFrom('email_tokens')
    .innerJoin('users', 'users.id', 'email_tokens.user_id')
    .selectAll('users')
    .where('email_tokens.token_hash', '=', hash)
    .where('email_tokens.purpose', '=', purpose)
    .where('email_tokens.used_at', 'is', null)
    .where('email_tokens.expires_at', '>', sql<string>`now()`)
    .where(tokenStillFitsUser)
    .executeTakeFirst()
}

/**
 * Uses the token once: its user id, or undefined when it is not live (see
 * findUserForEmailToken). Of two concurrent uses one wins. Other live tokens of the same
 * purpose for the user go with it.
 */
export async function consumeEmailToken (db: Kysely<Database>, hash: string, purpose: EmailTokenPurpose): Promise<string | undefined> {
  const used = await db.updateTable('email_tokens')
    .set({ used_at: sql`now()` })
    .where('token_hash', '=', hash)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
    .where(({ exists, selectFrom }) => exists(selectFrom('users').select(sql`1`.as('one'))
      .whereRef('users.id', '=', 'email_tokens.user_id')
      .where(tokenStillFitsUser)))
    .returning('user_id')
    .executeTakeFirst()
  if (used === undefined) return undefined
  await voidEmailTokens(db, used.user_id, purpose)
  return used.user_id
}

/** Ends every live token of this purpose for the user (a new password, a new address). */
export async function voidEmailTokens (db: Kysely<Database>, userId: string, purpose: EmailTokenPurpose): Promise<void> {
  await db.updateTable('email_tokens')
    .set({ used_at: sql`now()` })
    .where('user_id', '=', userId)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .execute()
}

/** Housekeeping: expired tokens (used ones go once they expire too). */
export async function purgeExpiredEmailTokens (db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('email_tokens').where('expires_at', '<', sql<string>`now()`).execute()
}
