// Sessions: one row per sign-in, keyed by its token's `jti`. An ended row stays until its
// token would have expired anyway, so that token is still known, and refused.
import { sql, type Kysely, type UpdateObject } from 'kysely'
import type { AuthMethod, Database, SessionMethod, SessionRow } from './types.js'

export interface NewSession {
  id: string
  userId: string
  method: SessionMethod
  /** The factors its holder proved. */
  methods: AuthMethod[]
  /** When they proved them (a token signed elsewhere: its `iat`). */
  authenticatedAt: Date
  provider?: string | null
  address: string | null
  userAgent: string | null
  expiresAt: Date
}

/** A session's methods as stored (space-separated); a row the previous version wrote has none: its `method` says. */
export function methodsOf (stored: string | null, method: SessionMethod): AuthMethod[] {
  if (stored !== null) return stored.split(' ').filter((m) => m !== '') as AuthMethod[]
  return [method === 'provider' || method === 'external' || method === 'passkey' ? method : 'password']
}

/** False when the id is taken already (by another user's session). */
export async function createSession (db: Kysely<Database>, session: NewSession): Promise<boolean> {
  const created = await db.insertInto('sessions')
    .values({
      id: session.id,
      user_id: session.userId,
      method: session.method,
      methods: session.methods.join(' '),
      authenticated_at: session.authenticatedAt,
      provider: session.provider ?? null,
      address: session.address,
      user_agent: session.userAgent,
      expires_at: session.expiresAt
    })
    .onConflict((oc) => oc.column('id').doNothing())
    .returning('id')
    .executeTakeFirst()
  return created !== undefined
}

/** Last seen now, unless it was seen within the minute: at most one write a minute per session. */
export async function touchSession (db: Kysely<Database>, id: string): Promise<void> {
  await db.updateTable('sessions')
    .set({ last_seen_at: sql`now()` })
    .where('id', '=', id)
    .where('last_seen_at', '<', sql<string>`now() - interval '1 minute'`)
    .execute()
}

/**
 * A step-up of the user's live session `id`, at `at` (the app's clock, which judges freshness),
 * with `method`; false when it has ended or expired meanwhile. Only that session: another of the
 * same user stays as it was.
 */
export function recordStepUp (db: Kysely<Database>, userId: string, id: string, at: Date, method: AuthMethod): Promise<boolean> {
  return updateLiveSession(db, userId, id, { stepped_up_at: at, stepped_up_with: method })
}

/** Sets `changes` on the user's session `id` while it still works (not ended, not expired); whether it did. */
async function updateLiveSession (db: Kysely<Database>, userId: string, id: string, changes: UpdateObject<Database, 'sessions'>): Promise<boolean> {
  const result = await db.updateTable('sessions')
    .set(changes)
    .where('id', '=', id)
    .where('user_id', '=', userId)
    .where('ended_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** When the user's session began, while it still works (not ended, not expired); else undefined. */
export async function liveSessionStart (db: Kysely<Database>, userId: string, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('sessions').select('created_at')
    .where('id', '=', id).where('user_id', '=', userId).where('ended_at', 'is', null).where('expires_at', '>', sql<string>`now()`)
    .executeTakeFirst()
  return row?.created_at
}

/** The user's sessions that still work, newest first. */
export function listLiveSessions (db: Kysely<Database>, userId: string, limit: number): Promise<SessionRow[]> {
  return db.selectFrom('sessions').selectAll()
    .where('user_id', '=', userId)
    .where('ended_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
    .orderBy('created_at', 'desc')
    .orderBy('id')
    .limit(limit)
    .execute()
}

/** Ends one live session of the user; false when there is none by that id. */
export function endSession (db: Kysely<Database>, userId: string, id: string): Promise<boolean> {
  return updateLiveSession(db, userId, id, { ended_at: sql`now()` })
}

/** Ends every live session of the user but `exceptId` (every one when it is undefined); how many ended. */
export async function endSessions (db: Kysely<Database>, userId: string, exceptId?: string): Promise<number> {
  let update = db.updateTable('sessions')
    .set({ ended_at: sql`now()` })
    .where('user_id', '=', userId)
    .where('ended_at', 'is', null)
    .where('expires_at', '>', sql<string>`now()`)
  if (exceptId !== undefined) update = update.where('id', '<>', exceptId)
  const result = await update.executeTakeFirst()
  return Number(result.numUpdatedRows)
}

/** Tokens without a session row issued before `at` stop working (see earliestTokenIat). */
export async function endOtherTokens (db: Kysely<Database>, userId: string, at: Date): Promise<void> {
  await db.updateTable('users').set({ other_tokens_ended_at: at }).where('id', '=', userId).execute()
}

/**
 * Sessions whose tokens expired a day ago: a job of plugins/app/sessions.ts. The day covers
 * clocks that disagree (expires_at is the app's, now() the database's): a row gone while its
 * token still worked would make that token one signed elsewhere, and accepted.
 */
export async function purgeExpiredSessions (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('sessions').where('expires_at', '<', sql<string>`now() - interval '1 day'`).executeTakeFirst()
  return Number(result.numDeletedRows)
}
