// Passkeys' rows (docs/passkeys.md): the user handle, the registered credentials, and the
// ceremonies' challenges. What must hold once (a challenge used, a counter advanced) is one
// statement whose WHERE is the check, so of two racing requests, on any instances, one wins.
import { sql, type Insertable, type Kysely } from 'kysely'
import { lockUser } from './users.js'
import type { Database, PasskeyRow, PasskeysTable, WebAuthnChallengeRow, WebAuthnChallengesTable, WebAuthnPurpose } from './types.js'

/** The most passkeys an account keeps (a list shows them all). */
export const MAX_PASSKEYS = 50

/** The user's handle, made with `fresh` when they have none yet (two racing requests keep one). */
export async function userHandleOf (db: Kysely<Database>, userId: string, fresh: () => string): Promise<string> {
  await db.insertInto('passkey_users').values({ user_id: userId, handle: fresh() }).onConflict((oc) => oc.column('user_id').doNothing()).execute()
  const row = await db.selectFrom('passkey_users').select('handle').where('user_id', '=', userId).executeTakeFirstOrThrow()
  return row.handle
}

/** The user's handle, if they ever asked to register a passkey. */
export async function findUserHandle (db: Kysely<Database>, userId: string): Promise<string | undefined> {
  const row = await db.selectFrom('passkey_users').select('handle').where('user_id', '=', userId).executeTakeFirst()
  return row?.handle
}

export function listPasskeys (db: Kysely<Database>, userId: string): Promise<PasskeyRow[]> {
  return db.selectFrom('passkeys').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').limit(MAX_PASSKEYS).execute()
}

/** How many passkeys the user has (a way in each). */
export async function countPasskeys (db: Kysely<Database>, userId: string): Promise<number> {
  const row = await db.selectFrom('passkeys').select(sql<string>`count(*)::text`.as('count')).where('user_id', '=', userId).executeTakeFirstOrThrow()
  return Number(row.count)
}

/** How many passkeys the user has, with their user row locked until the transaction ends. */
export async function lockUserPasskeys (db: Kysely<Database>, userId: string): Promise<number> {
  await lockUser(db, userId)
  return countPasskeys(db, userId)
}

export function findPasskeyByCredential (db: Kysely<Database>, credentialId: string): Promise<PasskeyRow | undefined> {
  return db.selectFrom('passkeys').selectAll().where('credential_id', '=', credentialId).executeTakeFirst()
}

/** The new passkey; undefined when its credential is registered already (to any account). */
export function insertPasskey (db: Kysely<Database>, passkey: Insertable<PasskeysTable>): Promise<PasskeyRow | undefined> {
  // No error on a taken credential id: inside a transaction an error would abort it (PostgreSQL).
  return db.insertInto('passkeys').values(passkey).onConflict((oc) => oc.column('credential_id').doNothing()).returningAll().executeTakeFirst()
}

export function renamePasskey (db: Kysely<Database>, userId: string, id: string, name: string): Promise<PasskeyRow | undefined> {
  return db.updateTable('passkeys').set({ name }).where('id', '=', id).where('user_id', '=', userId).returningAll().executeTakeFirst()
}

export function deletePasskey (db: Kysely<Database>, userId: string, id: string): Promise<PasskeyRow | undefined> {
  return db.deleteFrom('passkeys').where('id', '=', id).where('user_id', '=', userId).returningAll().executeTakeFirst()
}

/**
 * An assertion accepted: the counter moves from `from` to `to` (compare-and-set: false when
 * another request moved it first), the backup state is as seen, and the passkey was used now.
 */
export async function advancePasskeyCounter (db: Kysely<Database>, id: string, from: number, to: number, backedUp: boolean): Promise<boolean> {
  const result = await db.updateTable('passkeys')
    .set({ counter: to, backed_up: backedUp, last_used_at: sql`now()` })
    .where('id', '=', id)
    .where('counter', '=', from)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

export async function createWebAuthnChallenge (db: Kysely<Database>, challenge: Insertable<WebAuthnChallengesTable>): Promise<void> {
  await db.insertInto('webauthn_challenges').values(challenge).execute()
}

/**
 * Uses the live challenge with this hash, made for one of `purposes`: the challenge, unless it
 * is unknown, used, expired or made for another purpose. One statement: used once, whoever races.
 */
export function takeWebAuthnChallenge (db: Kysely<Database>, challengeHash: string, purposes: readonly WebAuthnPurpose[]): Promise<WebAuthnChallengeRow | undefined> {
  return db.updateTable('webauthn_challenges')
    .set({ used_at: sql`now()` })
    .where('challenge_hash', '=', challengeHash)
    .where('purpose', 'in', purposes)
    .where('used_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
    .returningAll()
    .executeTakeFirst()
}

/** Challenges expired an hour ago: a job of plugins/app/passkeys.ts. */
export async function purgeExpiredWebAuthnChallenges (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('webauthn_challenges').where('expires_at', '<', sql<string>`now() - interval '1 hour'`).executeTakeFirst()
  return Number(result.numDeletedRows)
}
