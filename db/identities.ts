// Sign-in through identity providers: the identities linked to users, the flows started and
// not yet called back, and the one-time codes the callback hands the web client.
import { sql, type Kysely } from 'kysely'
import type { Database, IdentityRow, OidcFlowsTable } from './types.js'

export function findIdentity (db: Kysely<Database>, issuer: string, subject: string): Promise<IdentityRow | undefined> {
  return db.selectFrom('user_identities').selectAll().where('issuer', '=', issuer).where('subject', '=', subject).executeTakeFirst()
}

export function listIdentities (db: Kysely<Database>, userId: string): Promise<IdentityRow[]> {
  return db.selectFrom('user_identities').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute()
}

/** Links the identity; it records the account's address as it is in this same statement. */
export async function createIdentity (db: Kysely<Database>, identity: Omit<IdentityRow, 'created_at' | 'account_email'>): Promise<IdentityRow> {
  return db.insertInto('user_identities')
    .values({ ...identity, account_email: sql<string | null>`(select email from users where id = ${identity.user_id})` })
    .returningAll()
    .executeTakeFirstOrThrow()
}

/**
 * The account now holds an address someone proved is theirs (a confirmed change, a reset):
 * the identities linked while it held another address go, since whoever linked them may have
 * moved the account there. Returns the providers of those removed.
 */
export async function removeIdentitiesLinkedElsewhere (db: Kysely<Database>, userId: string): Promise<string[]> {
  const removed = await db.deleteFrom('user_identities')
    .where('user_id', '=', userId)
    .where(sql<boolean>`account_email is distinct from (select email from users where id = ${userId})`)
    .returning('provider')
    .execute()
  return removed.map((row) => row.provider)
}

/**
 * The providers of the identities that sign in to the account (one entry per identity, oldest
 * first); with `keptByReset`, only those a reset keeps (linked under the address it has now).
 */
export async function linkedProviders (db: Kysely<Database>, userId: string, keptByReset = false): Promise<string[]> {
  let query = db.selectFrom('user_identities').select('provider').where('user_id', '=', userId)
  if (keptByReset) query = query.where(sql<boolean>`account_email = (select email from users where id = ${userId})`)
  const rows = await query.orderBy('created_at').orderBy('id').execute()
  return rows.map((row) => row.provider)
}

export async function deleteIdentity (db: Kysely<Database>, userId: string, id: string): Promise<IdentityRow | undefined> {
  return db.deleteFrom('user_identities').where('id', '=', id).where('user_id', '=', userId).returningAll().executeTakeFirst()
}

/**
 * The user's row locked until the transaction ends (two removals of sign-in methods run one
 * after the other), whether they have a password, and their identities of `providers` (those
 * configured: an identity of a provider no longer configured signs no one in).
 */
export async function lockUserSignInMethods (db: Kysely<Database>, userId: string, providers: string[]): Promise<{ hasPassword: boolean, identities: number } | undefined> {
  const user = await db.selectFrom('users').select(sql<boolean>`password is not null`.as('has_password')).where('id', '=', userId).forUpdate().executeTakeFirst()
  if (user === undefined) return undefined
  if (providers.length === 0) return { hasPassword: user.has_password, identities: 0 }
  const { count } = await db.selectFrom('user_identities').select(sql<string>`count(*)::text`.as('count'))
    .where('user_id', '=', userId).where('provider', 'in', providers).executeTakeFirstOrThrow()
  return { hasPassword: user.has_password, identities: Number(count) }
}

export async function createFlow (db: Kysely<Database>, flow: Omit<OidcFlowsTable, 'expires_at'>, ttlMs: number): Promise<void> {
  await db.insertInto('oidc_flows').values({ ...flow, expires_at: new Date(Date.now() + ttlMs) }).execute()
}

/** The flow of this state, used up: a callback works once. Undefined when unknown or expired. */
export function takeFlow (db: Kysely<Database>, stateHash: string) {
  return db.deleteFrom('oidc_flows')
    .where('state_hash', '=', stateHash)
    .where('expires_at', '>', sql<string>`now()`)
    .returningAll()
    .executeTakeFirst()
}

export async function createSignInCode (db: Kysely<Database>, code: { hash: string, userId: string, provider: string, browserHash: string }, ttlMs: number): Promise<void> {
  await db.insertInto('sign_in_codes')
    .values({ code_hash: code.hash, user_id: code.userId, provider: code.provider, browser_hash: code.browserHash, expires_at: new Date(Date.now() + ttlMs) })
    .execute()
}

/** The code's user, provider and browser binding, the code used up; undefined when unknown, used or expired. */
export function takeSignInCode (db: Kysely<Database>, hash: string) {
  return db.deleteFrom('sign_in_codes')
    .where('code_hash', '=', hash)
    .where('expires_at', '>', sql<string>`now()`)
    .returning(['user_id', 'provider', 'browser_hash'])
    .executeTakeFirst()
}

/**
 * The user's links in flight and codes not yet exchanged, voided: run where sessions end
 * (a password change or reset, "sign out everywhere else"), so none completes after it.
 */
export async function voidSignInState (db: Kysely<Database>, userId: string): Promise<void> {
  await db.deleteFrom('oidc_flows').where('link_user_id', '=', userId).execute()
  await db.deleteFrom('sign_in_codes').where('user_id', '=', userId).execute()
}

/** Flows never called back and codes never exchanged, once expired: a job of plugins/app/identity-providers.ts. */
export async function purgeExpiredSignInState (db: Kysely<Database>): Promise<number> {
  const flows = await db.deleteFrom('oidc_flows').where('expires_at', '<', sql<string>`now()`).executeTakeFirst()
  const codes = await db.deleteFrom('sign_in_codes').where('expires_at', '<', sql<string>`now()`).executeTakeFirst()
  return Number(flows.numDeletedRows) + Number(codes.numDeletedRows)
}
