// Users: creation with default preferences, lookups for sign-in and for token checks.
import { sql, type Kysely, type QueryCreator } from 'kysely'
import type { Profile, User } from '../schemas/users.js'
import { methodsOf } from './sessions.js'
import { prepareQuery } from './statements.js'
import type { AuthMethod, Database, SessionMethod, UserRow } from './types.js'

export const toUser = (row: UserRow): User => ({
  id: row.id,
  name: row.name,
  email: row.email,
  image: row.image,
  emailVerified: row.email_verified,
  createdAt: row.created_at,
  updatedAt: row.updated_at
})

export const toProfile = (row: UserRow, pendingEmail: string | null): Profile => ({ ...toUser(row), pendingEmail })

/** Emails are one account regardless of case or surrounding blanks. */
export const normalizeEmail = (email: string): string => email.trim().toLowerCase()

/** Inserts the user and their default preferences row; run it inside a transaction. No password: an account made through a provider. */
export async function createUserWithPreferences (
  db: Kysely<Database>,
  user: { id: string, name: string | null, email: string, passwordHash: string | null, emailVerified?: boolean }
): Promise<UserRow> {
  const row = await db.insertInto('users')
    .values({
      id: user.id,
      name: user.name,
      email: user.email,
      password: user.passwordHash,
      ...(user.emailVerified === true && { email_verified: sql<string>`now()` })
    })
    .returningAll()
    .executeTakeFirstOrThrow()
  await db.insertInto('user_preferences').values({ user_id: user.id }).execute()
  return row
}

export function findUserByEmail (db: Kysely<Database>, email: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirst()
}

export function findUserById (db: Kysely<Database>, id: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst()
}

export const USER_COLUMNS = ['id', 'name', 'email', 'password', 'image', 'email_verified', 'password_changed_at', 'created_at', 'updated_at'] as const

// The user a token names, unless that token was revoked, with the token's session if it has
// one (how and when its holder last proved who they are included, for the step-up check): one
// round trip per authenticated request, prepared once (db/engine/prepared.ts). A route's own
// statement may read it too, as its CTE `holder` (tokenHolder), and save that round trip.
export const tokenHolder = (db: QueryCreator<Database>, p: { userId: string, jti: string }) =>
  db.selectFrom('users')
    .leftJoin('sessions', (join) => join.onRef('sessions.user_id', '=', 'users.id').on('sessions.id', '=', p.jti))
    .select(USER_COLUMNS.map((column) => `users.${column}` as const))
    .select([
      'sessions.id as session_id',
      'sessions.ended_at as session_ended_at',
      'sessions.last_seen_at as session_last_seen_at',
      'sessions.method as session_method',
      'sessions.methods as session_methods',
      // greatest() skips a null: the sign-in until a step-up. A session that signed in with a
      // recovery code counts only a step-up with a TOTP code or a passkey (auth-extensions §6): null until then.
      sql<string | null>`case when sessions.methods like '%recovery%'
        then case when sessions.stepped_up_with in ('totp', 'passkey') then sessions.stepped_up_at end
        else greatest(sessions.authenticated_at, sessions.stepped_up_at) end`.as('session_verified_at'),
      sql<string | null>`users.other_tokens_ended_at`.as('other_tokens_ended_at')
    ])
    .where('users.id', '=', p.userId)
    .where(({ not, exists, selectFrom }) => not(exists(
      selectFrom('revoked_tokens').select(sql`1`.as('one')).where('jti', '=', p.jti)
    )))

export const userForToken = prepareQuery('user_for_token', (db, p: { userId: string, jti: string }) => tokenHolder(db, p))

/** A row of tokenHolder: the user's columns and the session's. */
export type TokenHolderRow = UserRow & {
  session_id: string | null
  session_ended_at: string | null
  session_last_seen_at: string | null
  session_method: SessionMethod | null
  session_methods: string | null
  session_verified_at: string | null
  other_tokens_ended_at: string | null
}

/** What a statement that reads the credential's holder itself gives: the holder's row (a token's, or an API key's: db/api-keys.ts, KeyHolderRow) and its own result. */
export interface WithHolder<T, H = TokenHolderRow> { holder: H, result: T }

/** The token a statement reading its holder itself asks about: its user, its id and when it was issued. */
export interface TokenAsk { userId: string, jti: string, iat: number }

/** Whole seconds since the epoch of a timestamptz, plus one: the `iat` from which a token counts (earliestTokenIat). */
const firstSecondAfter = (column: string) => sql<number>`floor(extract(epoch from ${sql.ref(column)}))::bigint + 1`

/**
 * Whether the CTE `holder`'s token still holds, for a statement that writes only for a token
 * that does: the same rules accounts/credentials.ts (checkTokenHolder) applies to the row it
 * returns, there the authority. Not past a password change (earliestTokenIat); a session not
 * ended; a token without one not from before "sign out everywhere else". (A revoked token or a
 * deleted user has no holder row at all.) test/accounts/token-in-statement.test.ts tries each.
 */
export const tokenHolds = (iat: number) => sql<boolean>`(holder.password_changed_at is null or ${iat}::bigint >= ${firstSecondAfter('holder.password_changed_at')})
  and case when holder.session_id is null
    then holder.other_tokens_ended_at is null or ${iat}::bigint >= ${firstSecondAfter('holder.other_tokens_ended_at')}
    else holder.session_ended_at is null end`

/** What a token check learns in its one query. */
export interface TokenHolder {
  user: UserRow
  /** The token's session; null for a token minted elsewhere (no row). */
  session: {
    endedAt: string | null
    lastSeenAt: string
    methods: AuthMethod[]
    /** Its sign-in or its last step-up, whichever came later; null for a recovery-code sign-in not yet stepped up with a TOTP code or a passkey. */
    verifiedAt: string | null
  } | null
  /** Tokens without a session issued before this second (whole seconds since the epoch) are void. */
  earliestSessionlessIat: number
}

/**
 * The user of a holder row (a token's or an API key's), its columns named, never the rest of
 * the row: a route's statement returns its own columns beside these.
 */
export const userOfHolder = (row: UserRow): UserRow => ({
  id: row.id,
  name: row.name,
  email: row.email,
  password: row.password,
  image: row.image,
  email_verified: row.email_verified,
  password_changed_at: row.password_changed_at,
  created_at: row.created_at,
  updated_at: row.updated_at
})

/** A tokenHolder row as what a token check learns; undefined (no row) for a revoked token or a deleted user. */
export function toTokenHolder (row: TokenHolderRow | undefined): TokenHolder | undefined {
  if (row === undefined) return undefined
  const {
    session_id: sessionId, session_ended_at: endedAt, session_last_seen_at: lastSeenAt, session_method: method, session_methods: methods,
    session_verified_at: verifiedAt, other_tokens_ended_at: othersEndedAt
  } = row
  return {
    user: userOfHolder(row),
    session: sessionId === null ? null : { endedAt, lastSeenAt: lastSeenAt!, methods: methodsOf(methods, method!), verifiedAt },
    earliestSessionlessIat: othersEndedAt === null ? 0 : Math.floor(Date.parse(othersEndedAt) / 1000) + 1
  }
}

/**
 * The channel of the notices a change to a token holder's rows sends, its payload the user's id
 * (db/migrations/2026-11-29T00-00-00_token-holder-notices.ts), where the session turned them on.
 */
export const TOKEN_HOLDER_CHANNEL = 'token_holder_changed'

/** Turns those notices on for this database session (the embedded database's one: accounts/holder-cache.ts). */
export async function sendTokenHolderNotices (db: Kysely<Database>): Promise<void> {
  await sql`set app.token_holder_notices = 'on'`.execute(db)
}

export async function findUserForToken (db: Kysely<Database>, userId: string, jti: string): Promise<TokenHolder | undefined> {
  const [row] = await userForToken.run(db, { userId, jti })
  return toTokenHolder(row)
}

/** A user row with the email change waiting for its confirmation, if any. */
export type UserWithPending = UserRow & { pending_email: string | null }

const pendingEmail = sql<string | null>`users.pending_email`.as('pending_email')

/** The address an email change waits to have confirmed, or null. */
export async function findPendingEmail (db: Kysely<Database>, id: string): Promise<string | null> {
  const row = await db.selectFrom('users').select(pendingEmail).where('id', '=', id).executeTakeFirst()
  return row?.pending_email ?? null
}

/**
 * Applies the changes; undefined when there is no such user, or when a password change finds
 * the password already changed from `passwordHash.from` (a concurrent change won).
 * `pendingEmail`: a new address to wait for (its confirmation applies it: applyPendingEmail),
 * or null to drop the one waiting; a new one replaces the old, and so do the links sent for it.
 */
export async function updateUser (
  db: Kysely<Database>,
  id: string,
  changes: { name?: string | null, image?: string | null, pendingEmail?: string | null, passwordHash?: { from: string, to: string } }
): Promise<UserWithPending | undefined> {
  const { passwordHash } = changes
  let update = db.updateTable('users')
    .set({
      ...(changes.name !== undefined && { name: changes.name }),
      ...(changes.image !== undefined && { image: changes.image }),
      ...(changes.pendingEmail !== undefined && { pending_email: changes.pendingEmail, pending_email_at: changes.pendingEmail === null ? null : sql<string>`now()` }),
      // A new password ends every session that existed before it. The time comes from this
      // process's clock, the one that stamps the tokens' `iat`, not the database server's.
      ...(passwordHash !== undefined && { password: passwordHash.to, password_changed_at: new Date() }),
      updated_at: sql`now()`
    })
    .where('id', '=', id)
  if (passwordHash !== undefined) update = update.where('password', '=', passwordHash.from)
  return update.returningAll().returning(pendingEmail).executeTakeFirst()
}

/**
 * Holds the user's row (shared, until the transaction ends) while its password is still
 * `password`, the one a sign-in was proved under; false when it changed since (or the user is
 * gone). A password change or reset waits for the holder, or the holder for it and then sees
 * the new password: a sign-in in flight never starts a session the change did not end.
 */
export async function holdUserWithPassword (db: Kysely<Database>, id: string, password: string | null): Promise<boolean> {
  const row = await db.selectFrom('users').select('id').where('id', '=', id)
    .where(sql<boolean>`password is not distinct from ${password}`)
    .forShare()
    .executeTakeFirst()
  return row !== undefined
}

/** The user's row, locked until the transaction ends, with its pending address. */
export function lockUser (db: Kysely<Database>, id: string): Promise<UserWithPending | undefined> {
  return db.selectFrom('users').selectAll().select(pendingEmail).where('id', '=', id).forUpdate().executeTakeFirst()
}

/**
 * The new address `email` confirmed: it becomes the account's, verified, and the links sent to
 * the old one die with it (email_changed_at, db/email-tokens.ts). Undefined unless it is the
 * address waiting: a change to another one may have committed since its link was checked.
 */
export function applyPendingEmail (db: Kysely<Database>, id: string, email: string): Promise<UserRow | undefined> {
  return db.updateTable('users')
    .set({
      email: sql<string>`pending_email`,
      email_verified: sql<string>`now()`,
      email_changed_at: sql<string>`now()`,
      pending_email: null,
      pending_email_at: null,
      updated_at: sql`now()`
    })
    .where('id', '=', id)
    .where(sql<boolean>`pending_email = ${email}`)
    .returningAll()
    .executeTakeFirst()
}

/**
 * A password reset: the new password ends every older session (like a change), the address
 * the link reached is thereby verified, and an email change waiting for confirmation is
 * dropped (whoever asked for it may be the reason for the reset).
 */
export function resetPassword (db: Kysely<Database>, id: string, passwordHash: string): Promise<UserRow> {
  return db.updateTable('users')
    .set({
      password: passwordHash,
      password_changed_at: new Date(),
      email_verified: sql<string>`coalesce(email_verified, now())`,
      pending_email: null,
      pending_email_at: null,
      updated_at: sql`now()`
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow()
}

/** The address is confirmed (the first confirmation's time is kept). */
export function markEmailVerified (db: Kysely<Database>, id: string): Promise<UserRow> {
  return db.updateTable('users')
    .set({ email_verified: sql<string>`coalesce(email_verified, now())`, updated_at: sql`now()` })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow()
}

/** Deletes the user; tasks, preferences, revoked tokens, usage events, email tokens and queued email go with it (ON DELETE CASCADE). */
export async function deleteUser (db: Kysely<Database>, id: string): Promise<boolean> {
  const result = await db.deleteFrom('users').where('id', '=', id).executeTakeFirst()
  return result.numDeletedRows > 0n
}

/**
 * The earliest `iat` (whole seconds) a token of this user may carry: the second after their
 * last password change. A token from the very second of the change cannot be told apart
 * from one issued just before it, so it is refused too, and tokens signed in that second
 * carry the next one (see plugins/app/authenticate.ts).
 */
export const earliestTokenIat = (user: Pick<UserRow, 'password_changed_at'>): number =>
  user.password_changed_at === null ? 0 : Math.floor(Date.parse(user.password_changed_at) / 1000) + 1

/** Postgres unique_violation, e.g. a second account for one email. */
export const isUniqueViolation = (err: unknown): boolean =>
  typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '23505'
