// The one-time email tokens (reset, verification and device links): only their SHA-256 is
// stored, looked up by hash, used once, and void once the account's address is not the one
// they were sent to (docs/email.md); a verification link may also be for the address an email
// change waits for (pending_email), and only for its latest request.
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
// changed its address: after A → B → A, links sent to A the first time stay dead. Or it is a
// verification link for the address a change waits for, issued with the latest request for
// it: asking for B, then C, then B again leaves only the last link to B alive. Both sides are
// transaction times (now()), so a link issued with the request itself counts as after it.
const tokenStillFitsUser = sql<boolean>`(users.email = email_tokens.email and (users.email_changed_at is null or email_tokens.created_at >= users.email_changed_at))
  or (email_tokens.purpose = 'email_verification' and users.pending_email = email_tokens.email and email_tokens.created_at >= users.pending_email_at)`

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
 * Uses the token once: its user id and the address it was sent to, or undefined when it is
 * not live (see findUserForEmailToken). Of two concurrent uses one wins. Other live tokens of
 * the same purpose sent to the same address go with it (a link for the address a change waits
 * for outlives the confirmation of the current one).
 */
export async function consumeEmailToken (db: Kysely<Database>, hash: string, purpose: EmailTokenPurpose): Promise<{ userId: string, email: string } | undefined> {
  const used = await db.updateTable('email_tokens')
    .set({ used_at: sql`now()` })
    .where('token_hash', '=', hash)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
    .where(({ exists, selectFrom }) => exists(selectFrom('users').select(sql`1`.as('one'))
      .whereRef('users.id', '=', 'email_tokens.user_id')
      .where(tokenStillFitsUser)))
    .returning(['user_id', 'email'])
    .executeTakeFirst()
  if (used === undefined) return undefined
  await voidEmailTokens(db, used.user_id, purpose, used.email)
  return { userId: used.user_id, email: used.email }
}

/** Ends every live token of this purpose for the user (a new password, a new address), or only those sent to `email`. */
export async function voidEmailTokens (db: Kysely<Database>, userId: string, purpose: EmailTokenPurpose, email?: string): Promise<void> {
  let update = db.updateTable('email_tokens')
    .set({ used_at: sql`now()` })
    .where('user_id', '=', userId)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
  if (email !== undefined) update = update.where('email', '=', email)
  await update.execute()
}

/** Housekeeping: expired tokens (used ones go once they expire too). */
export async function purgeExpiredEmailTokens (db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('email_tokens').where('expires_at', '<', sql<string>`now()`).execute()
}
